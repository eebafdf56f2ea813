"""``--scenario seed-3x20``: a generated workload shaped like the seed articles' test (3 clusters x 20 nodes).

Each cluster has 12 CPU nodes (32 cpu, 128 GiB) and 8 GPU nodes (64 cpu, 256 GiB, 8 GPUs). Online
services run on every cluster from the start (12 of 8 cpu and 2 GPU inference services of 1 GPU),
following the day/night curve; the replay starts at 20:00 local time, when online load falls. Batch work
arrives in the first 20 minutes, 60 % of it submitted to the first cluster, 25 % to the second and 15 % to
the third (the seeds' "GPU usage 95 %, 40 %, 65 % while new training jobs queue on the first cluster"):
GPU training jobs of 1-8 GPUs (half of them checkpoint and are preemptible) and CPU batch jobs
(preemptible), sized so that the work fills the federation for about an hour.
"""

from __future__ import annotations

import random

from airflow_provider_fedsched.replay.topology import REGIONS, Federation, Tide, build_federation
from airflow_provider_fedsched.replay.workload import Node, Task

__all__ = ["SCENARIOS", "seed_3x20"]

SCENARIOS = ("seed-3x20",)
ONLINE_RUN = 12 * 3600.0
"""Online services outlive the batch work (they are excluded from the makespan, which is the batch's)."""


def seed_3x20(seed: int) -> Federation:
    rng = random.Random(seed)
    names = [region.name for region in REGIONS[:3]]
    nodes: list[Node] = []
    for cluster in names:
        for index in range(12):
            nodes.append(Node(f"{cluster}-cpu-{index:02d}", 32_000, 131_072, 0, "", cluster))
        for index in range(8):
            nodes.append(Node(f"{cluster}-gpu-{index:02d}", 64_000, 262_144, 8, "A100", cluster))
    tasks: list[Task] = []
    for cluster in names:
        for index in range(12):
            tasks.append(
                Task(
                    f"web-{cluster}-{index:02d}",
                    0.0,
                    ONLINE_RUN,
                    8000,
                    16_384,
                    0,
                    qos="LS",
                    home=cluster,
                    pinned=True,
                )
            )
        for index in range(2):
            tasks.append(
                Task(
                    f"infer-{cluster}-{index}",
                    0.0,
                    ONLINE_RUN,
                    8000,
                    32_768,
                    1000,
                    qos="LS",
                    home=cluster,
                    pinned=True,
                )
            )
    capacity_gpu = 3 * 8 * 8 * 1000
    cpu_nodes_cpu = 3 * 12 * 32_000
    """CPU batch runs on CPU nodes only (GPU nodes are tainted for GPU work)."""
    gpu_work = cpu_work = 0.0
    number = 0
    # Fill about 85 % of an hour of what the online services leave free (by request), for each resource.
    gpu_target = 0.85 * 3600 * (capacity_gpu - 3 * 2000)
    cpu_target = 0.85 * 3600 * (cpu_nodes_cpu - 3 * 12 * 8000)
    homes, weights = names, [0.60, 0.25, 0.15]
    while gpu_work < gpu_target or cpu_work < cpu_target:
        number += 1
        arrival = rng.uniform(0.0, 1200.0)
        home = rng.choices(homes, weights)[0]
        if gpu_work < gpu_target and (cpu_work >= cpu_target or rng.random() < 0.5):
            gpus = rng.choice((1, 1, 2, 2, 4, 8))
            run = rng.uniform(600.0, 2400.0)
            qos = "BE" if rng.random() < 0.5 else "Burstable"
            task = Task(
                f"train-{number:04d}",
                arrival,
                run,
                5000 * gpus,
                24_576 * gpus,
                1000 * gpus,
                qos=qos,
                home=home,
            )
        else:
            cpus = rng.choice((2, 4, 4, 8, 16))
            run = rng.uniform(300.0, 1800.0)
            task = Task(f"batch-{number:04d}", arrival, run, 1000 * cpus, 4096 * cpus, 0, qos="BE", home=home)
        gpu_work += task.gpu_milli * task.run
        cpu_work += 0 if task.gpu_milli else task.cpu * task.run
        tasks.append(task)
    tasks.sort(key=lambda task: (task.arrival, task.name))
    # 20:00 in the clusters' UTC+8 is 12:00 UTC.
    tide = Tide(start_hour_utc=12.0)
    federation = build_federation(
        nodes, tasks, clusters=3, seed=seed, skew=0.0, tide=tide, keep_clusters=True
    )
    federation.gpu_taint = True  # GPU nodes are kept for GPU work, as such clusters are run
    return federation
