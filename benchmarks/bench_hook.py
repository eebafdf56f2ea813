"""FederationHook: snapshot refresh across many clusters, and decisions against cached shared state.

Run: ``.venv/bin/python benchmarks/bench_hook.py [--quick]``

1. **Refresh.** 20 simulated clusters of 50 nodes (``fedsched sim up`` in a separate process, as remote
   clusters would be), each API answering with an added latency of
   50 + 10*i ms (a WAN round trip; the slowest 240 ms). Refreshing all 20 (concurrently, each within its
   timeout) is compared with refreshing the slowest one alone, in the same run. Target: <= 1.5x. The same
   is printed without added latency, where the cost is CPU (parsing 20 clusters' lists in one process).
2. **Decision against cached state.** Snapshots of 100 and 1,000 clusters of 50 nodes (the engine
   benchmark's generator) are put in shared state; ``FederationHook.decide`` then reads markers,
   cooldowns and reservations from the state and runs the engine. Baseline in the same run: the bare
   engine on the same in-memory snapshots. Backends: in-memory, and Airflow Variables on SQLite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import NOW, generate, percentile, requests

NODES = 50


def sim_config(clusters: int) -> dict[str, object]:
    return {
        "time_scale": 1.0,
        "clusters": [
            {
                "name": f"c{i:02d}",
                "region": f"r{i % 5}",
                "node_pools": [{"name": "p", "count": NODES, "cpu": "16", "memory": "64Gi"}],
            }
            for i in range(clusters)
        ],
    }


def median_seconds(action: object, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class SimProcess:
    """``fedsched sim up`` in its own process: member clusters are remote, they do not share our GIL."""

    def __init__(self, clusters: int) -> None:
        import subprocess

        import yaml

        self.dir = Path(tempfile.mkdtemp(prefix="fedsched-bench-sim-"))
        (self.dir / "sim.yaml").write_text(yaml.safe_dump(sim_config(clusters)))
        fedsched = str(Path(sys.executable).with_name("fedsched"))
        self.fedsched = fedsched
        self.process = subprocess.Popen(
            [fedsched, "sim", "up", "--config", str(self.dir / "sim.yaml"), "--state-dir", str(self.dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if "ready" in line:
                break

    def fault(self, cluster: str, *args: str) -> None:
        import subprocess

        subprocess.run(
            [self.fedsched, "sim", "fault", "--state-dir", str(self.dir), cluster, *args],
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def bench_refresh(repeat: int) -> list[tuple[str, float, float, float]]:
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

    rows = []
    sim = SimProcess(20)
    try:
        hook = FederationHook(
            sim.dir / "federation.yaml",
            kubeconfig=sim.dir / "kubeconfig",
            state=FederationState(MemoryStateBackend()),
            snapshot_timeout=5.0,
        )
        names = sorted(c.name for c in hook.spec.clusters)
        hook.collect(names)  # warm up: imports, kubeconfig parsing
        for label, latency in (("no added latency", False), ("WAN latency 50-240 ms", True)):
            for index, name in enumerate(names):
                sim.fault(name, "latency", f"seconds={0.05 + 0.01 * index if latency else 0}")
            slowest = names[-1]
            one = median_seconds(lambda: hook.collect([slowest]), repeat)  # noqa: B023
            everything = median_seconds(lambda: hook.collect(names), repeat)
            rows.append((label, one, everything, everything / one))
    finally:
        sim.stop()
    return rows


def airflow_sqlite() -> None:
    home = Path(tempfile.mkdtemp(prefix="fedsched-bench-"))
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
        }
    )
    from airflow.utils import db

    db.initdb()


def bench_cached_decisions(
    sizes: list[int], decisions: int
) -> list[tuple[str, int, float, float, float, float]]:
    from airflow_provider_fedsched.federation import FederationEngine
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import (
        AirflowVariableStateBackend,
        FederationState,
        MemoryStateBackend,
    )

    rows = []
    for clusters in sizes:
        spec, snapshots = generate(clusters, seed=7)
        # Every generated snapshot counts as fresh here: this measures reading state, not refreshing.
        spec = spec.model_copy(
            update={"policy": spec.policy.model_copy(update={"snapshot_ttl_seconds": 1e9})}
        )
        workload = requests(11, decisions)
        engine = FederationEngine(spec)
        for request in workload[:3]:
            engine.decide(request, snapshots, now=NOW)
        base = []
        for request in workload:
            start = time.perf_counter()
            engine.decide(request, snapshots, now=NOW)
            base.append(time.perf_counter() - start)
        for backend_name, backend in (
            ("in-memory", MemoryStateBackend()),
            ("Airflow Variables (SQLite)", AirflowVariableStateBackend()),
        ):
            state = FederationState(backend, federation=f"bench-{clusters}-{backend_name[:3]}")
            for snapshot in snapshots.values():
                state.snapshots.put([snapshot])
            hook = FederationHook(spec, state=state)
            for request in workload[:3]:
                hook.decide(request, now=NOW)
            latencies = []
            for request in workload:
                start = time.perf_counter()
                hook.decide(request, now=NOW)
                latencies.append(time.perf_counter() - start)
            rows.append(
                (
                    backend_name,
                    clusters,
                    statistics.median(base) * 1e3,
                    statistics.median(latencies) * 1e3,
                    percentile(latencies, 0.99) * 1e3,
                    statistics.median(latencies) / statistics.median(base),
                )
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    airflow_sqlite()
    refresh = bench_refresh(3 if args.quick else 7)
    print("### FederationHook: refreshing 20 simulated clusters (50 nodes each)\n")
    print("| setup | slowest cluster alone (median) | all 20 (median) | ratio | target |")
    print("|---|---:|---:|---:|---:|")
    for label, one, everything, ratio in refresh:
        target = "<= 1.5x" if "WAN" in label else "-"
        print(f"| {label} | {one * 1e3:.0f} ms | {everything * 1e3:.0f} ms | {ratio:.2f}x | {target} |")
    cached = bench_cached_decisions([100] if args.quick else [100, 1000], 100 if args.quick else 300)
    print("\n### FederationHook: decisions against cached shared state\n")
    print(
        "| state backend | clusters | bare engine p50 (baseline) | hook.decide p50 | hook.decide p99 "
        "| ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for backend_name, clusters, base, p50, p99, ratio in cached:
        print(f"| {backend_name} | {clusters} | {base:.2f} ms | {p50:.2f} ms | {p99:.2f} ms | {ratio:.2f}x |")
    print(f"\nCommand: .venv/bin/python benchmarks/bench_hook.py{' --quick' if args.quick else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
