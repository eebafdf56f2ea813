"""``make demo``: the main job on the embedded default.

Today it asks the scoring engine, through ``fedsched place``, where each kind of task of the example
federation would run, and prints the decision tables. Later work grows it into a real DAG run against the
simulated federation.
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_provider_fedsched.cli import main as fedsched

EXAMPLES = Path(__file__).resolve().parent.parent / "example_dags"

SCENARIOS: list[tuple[str, list[str]]] = [
    ("A GPU training task goes to the GPU pool", ["--cpu", "4", "--memory", "16Gi", "--gpu", "2",
     "--toleration", "nvidia.com/gpu=present:NoSchedule"]),
    ("A task reading sovereign EU data stays in eu-west-1", ["--cpu", "2", "--memory", "4Gi",
     "--dataset", "eu-customers"]),
    ("A task reading 2 TB of clickstream runs where the data is", ["--cpu", "2", "--memory", "8Gi",
     "--dataset", "clickstream-archive", "--duration", "30m"]),
    ("A plain CPU task goes where CPU is cheapest", ["--cpu", "2", "--memory", "4Gi"]),
    ("The cheapest cluster is cooling down after a failure", ["--cpu", "2", "--memory", "4Gi",
     "--cooldown", "east-cpu"]),
    ("No cluster can ever take a 64-GPU pod", ["--cpu", "8", "--gpu", "64",
     "--toleration", "nvidia.com/gpu=present:NoSchedule"]),
]


def main() -> int:
    federation = EXAMPLES / "federation.yaml"
    snapshots = EXAMPLES / "snapshots.yaml"
    for title, args in SCENARIOS:
        print(f"\n=== {title}\n$ fedsched place --federation {federation.name} --snapshots {snapshots.name} "
              + " ".join(args), flush=True)
        code = fedsched(["place", "--federation", str(federation), "--snapshots", str(snapshots), *args])
        print(f"(exit {code})", flush=True)
        if code not in (0, 3):
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
