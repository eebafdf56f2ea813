"""Tenants: weighted fair share on a saturated federation, and what the tenant rules cost a decision.

Run: ``.venv/bin/python benchmarks/bench_tenants.py [--quick]``

1. **Fair share.** Four clusters of two 8-GPU nodes (64 GPUs). Tenants ``team-a`` (weight 3) and ``team-b``
   (weight 1) each keep 48 one-GPU tasks polling for a cluster (as 48 Airflow pool slots would: 96 > 64)
   from an endless backlog, so the federation is saturated throughout; task durations 30-90 s from a fixed
   seed; time advances in 5 s steps and at each step the waiting tasks poll, ``team-b``'s first (the order
   that favours it), round after round until a round places nothing. Each decision goes through the engine
   with the tenant inputs the hook would build (usage from the running tasks, the waiting list). Service =
   GPU-seconds run per tenant after a warm-up; the same run without fair share (no waiting list: first
   come, first served) is the baseline.
2. **Decision latency.** The engine at 100 clusters of 50 nodes (``bench_engine.generate``), the same
   requests with and without tenants: two tenants with quotas, one with a budget, 40 waiting tasks (four
   request shapes), the deciding tenant the over-served one (so ``FairShare`` checks the waiting tasks
   against every cluster: the costly case). p50 of each, interleaved, and their ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import generate, requests

from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    NodeSnapshot,
    TaskRequest,
    load_spec,
)
from airflow_provider_fedsched.federation.tenancy import TenantInputs, WaitingTask

GPU = "nvidia.com/gpu"
START = datetime(2025, 6, 1, tzinfo=UTC)
STEP = 5.0
SLOTS = 48


@dataclass
class Task:
    id: str
    tenant: str
    duration: float
    cluster: str | None = None
    node: str | None = None
    started: float = 0.0


def fair_share_run(seconds: float, warmup: float, fair: bool, seed: int) -> dict[str, float]:
    clusters = [f"c{i}" for i in range(4)]
    spec = load_spec(
        {
            "clusters": [
                {"name": c, "conn_id": c, "region": "r", "prices": {"gpu_hour": 1.0}} for c in clusters
            ],
            "policy": {"snapshot_ttl_seconds": 86400},  # never stale in the run (at most 10 years allowed)
            "tenants": [{"name": "team-a", "weight": 3}, {"name": "team-b", "weight": 1}],
        }
    )
    engine = FederationEngine(spec)
    nodes = {c: [f"{c}-n{i}" for i in range(2)] for c in clusters}
    rng = random.Random(seed)
    counter = 0
    waiting: list[Task] = []
    running: list[Task] = []
    used: dict[tuple[str, str], int] = {}

    def submit(tenant: str) -> None:
        nonlocal counter
        counter += 1
        waiting.append(Task(f"{tenant}-{counter}", tenant, rng.uniform(30, 90)))

    def decide(task: Task, moment: datetime, now: float) -> bool:
        """One poll of a waiting task: the decision the hook would make, with the inputs it would read."""
        snapshots = {
            c: ClusterSnapshot(
                cluster=c,
                observed_at=moment,
                nodes=[
                    NodeSnapshot(name=n, allocatable={GPU: 8}, requested={GPU: used.get((c, n), 0)})
                    for n in nodes[c]
                ],
            )
            for c in clusters
        }
        usage: dict[str, dict[str, int]] = {}
        for other in running:
            counts = usage.setdefault(other.tenant, {GPU: 0, "pods": 0})
            counts[GPU] += 1
            counts["pods"] += 1
        listed = tuple(
            WaitingTask(t.id, t.tenant, {GPU: 1}, frozenset(clusters), START)
            for t in waiting
            if t is not task
        )
        inputs = TenantInputs(usage=usage, waiting=listed if fair else (), capacity={GPU: 64})
        request = TaskRequest(resources={GPU: 1}, tenant=task.tenant, expected_duration_seconds=task.duration)
        decision = engine.decide(request, snapshots, now=moment, tenancy=inputs)
        if not decision.placed or decision.cluster is None:
            return False
        node = next(n for n in nodes[decision.cluster] if used.get((decision.cluster, n), 0) < 8)
        used[(decision.cluster, node)] = used.get((decision.cluster, node), 0) + 1
        task.cluster, task.node, task.started = decision.cluster, node, now
        waiting.remove(task)
        running.append(task)
        return True

    for _ in range(SLOTS):
        submit("team-b")
        submit("team-a")
    service = {"team-a": 0.0, "team-b": 0.0}
    now = 0.0
    while now < seconds:
        for task in [t for t in running if t.started + t.duration <= now]:
            running.remove(task)
            used[(str(task.cluster), str(task.node))] -= 1
            submit(task.tenant)
        moment = START + timedelta(seconds=now)
        placed = True
        while placed:  # the waiting tasks poll again until a round places nothing (they poll every 2 s)
            placed = False
            for task in sorted(waiting, key=lambda t: (t.tenant != "team-b", t.id)):
                placed |= decide(task, moment, now)
        if now >= warmup:
            for task in running:
                service[task.tenant] += STEP
        now += STEP
    return service


def latency(decisions: int, seed: int, costly: bool = True) -> dict[str, float]:
    spec, snapshots = generate(100, seed)
    document = spec.model_dump(mode="json")
    document["tenants"] = [
        {
            "name": "team-a",
            "quota": {"cpu": "100000", "memory": "1000Ti", GPU: 10000, "pods": 100000},
            "weight": 3,
        },
        {"name": "team-b", "quota": {"cpu": "100000", "pods": 100000}, "budget": {"max_cost": 10**9}},
    ]
    with_tenants = load_spec(document)
    plain, tenanted = FederationEngine(spec), FederationEngine(with_tenants)
    now = max(s.observed_at for s in snapshots.values()) + timedelta(seconds=1)
    clusters = frozenset(snapshots)
    inputs = TenantInputs(
        usage={"team-a": {"cpu": 100, GPU: 1}, "team-b": {"cpu": 10**6}},
        waiting=tuple(
            WaitingTask(f"w{i}", "team-a", {"cpu": 1000 * (i % 4 + 1)}, clusters, START) for i in range(40)
        ),
        spent={"team-b": 10.0},
        capacity={"cpu": 10**7},
    )
    if not costly:  # the common case: a quota with room, no budget, no tenant further below waiting
        document["tenants"][1].pop("budget")
        tenanted = FederationEngine(load_spec(document))
        inputs = TenantInputs(usage=inputs.usage, capacity=inputs.capacity)
    shapes = requests(seed, decisions)
    tenant_shapes = [r.model_copy(update={"tenant": "team-b"}) for r in shapes]
    # Warm-up: build every snapshot's index once.
    plain.decide(shapes[0], snapshots, now=now)
    tenanted.decide(tenant_shapes[0], snapshots, now=now, tenancy=inputs)
    without: list[float] = []
    with_: list[float] = []
    placed_equal = 0
    for request, tenant_request in zip(shapes, tenant_shapes, strict=True):
        started = time.perf_counter()
        a = plain.decide(request, snapshots, now=now)
        without.append(time.perf_counter() - started)
        started = time.perf_counter()
        b = tenanted.decide(tenant_request, snapshots, now=now, tenancy=inputs)
        with_.append(time.perf_counter() - started)
        placed_equal += a.cluster == b.cluster
    p50_without, p50_with = statistics.median(without), statistics.median(with_)
    return {
        "p50_without_ms": p50_without * 1000,
        "p50_with_ms": p50_with * 1000,
        "ratio": p50_with / p50_without,
        "same_choice": placed_equal / decisions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (CI smoke)")
    args = parser.parse_args()
    seconds, warmup, decisions = (900.0, 150.0, 300) if args.quick else (3600.0, 300.0, 2000)
    results: dict[str, Any] = {}
    for fair in (True, False):
        service = fair_share_run(seconds, warmup, fair, seed=7)
        ratio = service["team-a"] / service["team-b"]
        results["fair" if fair else "fifo"] = ratio
        label = "fair share (weights 3:1)" if fair else "baseline, no fair share"
        print(
            f"{label}: team-a {service['team-a']:.0f} GPU-s, team-b {service['team-b']:.0f} GPU-s, "
            f"ratio {ratio:.3f} (target 3.000, off by {abs(ratio - 3) / 3:.1%})"
        )
    ratios = []
    for costly in (True, False):
        found = latency(decisions, seed=11, costly=costly)
        ratios.append(found["ratio"])
        case = "budget + 40 waiting tasks ahead" if costly else "quota only"
        print(
            f"decision latency at 100 clusters x 50 nodes ({decisions} decisions, {case}): p50 without "
            f"tenants {found['p50_without_ms']:.3f} ms, with tenants {found['p50_with_ms']:.3f} ms, "
            f"ratio {found['ratio']:.3f}; same cluster chosen in {found['same_choice']:.0%}"
        )
    ok = abs(results["fair"] - 3) / 3 <= 0.10 and max(ratios) <= 1.10
    print("tenants benchmark:", "within targets" if ok else "OUTSIDE targets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
