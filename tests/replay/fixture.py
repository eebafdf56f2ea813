"""A small generated trace in the Alibaba columns, for the fast replay tests."""

from __future__ import annotations

import csv
import random
from pathlib import Path

from airflow_provider_fedsched.replay.workload import NODE_COLUMNS, POD_COLUMNS

POD_HEADER = ",".join(
    (*POD_COLUMNS, "gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
)


def write_trace(folder: Path, pods: int = 160, seed: int = 7) -> tuple[Path, Path]:
    rng = random.Random(seed)
    nodes_path, pods_path = folder / "nodes.csv", folder / "pods.csv"
    with nodes_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(NODE_COLUMNS)
        for index in range(24):
            gpus, model = ((8, "V100M32") if index % 3 == 0 else (2, "T4")) if index % 2 else (0, "")
            writer.writerow([f"node-{index:02d}", 32000, 131072, gpus, model])
    with pods_path.open("w", newline="") as handle:
        handle.write(POD_HEADER + "\n")
        clock = 0
        for index in range(pods):
            clock += rng.randrange(0, 40)
            gpu = rng.random() < 0.5
            num_gpu, milli = (rng.choice((1, 1, 2)), rng.choice((250, 500, 1000))) if gpu else (0, 0)
            if num_gpu > 1:
                milli = 1000
            qos = rng.choice(("LS", "BE", "BE", "Burstable"))
            spec = "V100M32" if gpu and rng.random() < 0.1 else ""
            run = rng.randrange(60, 1800)
            cpu = rng.choice((1000, 2000, 4000, 8000))
            handle.write(
                f"pod-{index:03d},{cpu},{cpu * 2},{num_gpu},{milli},{spec},{qos},Running,"
                f"{clock},{clock + run},{clock}\n"
            )
    return nodes_path, pods_path
