"""How short can seed-3x20's makespan get with full knowledge? A clairvoyant list-scheduling reference.

Every node of the three clusters in one pool, run times known exactly, no snapshot staleness, no
sovereignty rule; the online services hold their requests on their home cluster. At every arrival and
every end, the waiting tasks are started in priority order on a node where they fit (best fit: least
left of the pod's scarcest resource; least allocated; or the replay binder's rule, GPU pods packed and
the others least allocated). GPU nodes take GPU work only, as in the scenario. The makespan is the
batch work's, as in the replay.

Run: ``.venv/bin/python benchmarks/clairvoyant_seed_3x20.py [--seeds 0,1,2] [--trials 100]``

Not a lower bound: an optimal offline schedule may leave capacity idle on purpose, which list scheduling
never does. It shows what schedules built with more knowledge than any federation has reach, beside the
lower bound ``fedsched replay`` reports.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_fedsched.replay import Settings, replay
from airflow_provider_fedsched.replay.scenario import seed_3x20
from airflow_provider_fedsched.replay.workload import Task

Priority = Callable[[Task], float]
Free = list[int]
"""cpu, memory MiB, GPU thousandths left on a node."""


def best_fit(task: Task, free: Free) -> float:
    return free[2] - task.gpu_milli if task.gpu_milli else free[0] - task.cpu


def least_allocated(task: Task, free: Free) -> float:
    return -best_fit(task, free)


def replay_binder(task: Task, free: Free) -> float:
    """The replay's in-cluster rule: GPU pods packed (best fit on the GPU), others least allocated."""
    return best_fit(task, free) if task.gpu_milli else least_allocated(task, free)


CHOICES = {"best fit": best_fit, "least allocated": least_allocated, "the replay binder's": replay_binder}


def makespan(seed: int, priority: Priority, choose: Callable[[Task, Free], float]) -> float:
    federation = seed_3x20(seed)
    nodes: list[tuple[str, bool]] = []
    free: list[Free] = []
    for cluster, members in federation.clusters.items():
        for member in members:
            nodes.append((cluster, member.gpus > 0))
            free.append([member.cpu, member.memory_mib, member.gpus * 1000])

    def fits(index: int, task: Task) -> bool:
        room = free[index]
        return room[0] >= task.cpu and room[1] >= task.memory_mib and room[2] >= task.gpu_milli

    def take(index: int, task: Task, sign: int) -> None:
        free[index][0] -= sign * task.cpu
        free[index][1] -= sign * task.memory_mib
        free[index][2] -= sign * task.gpu_milli

    batch: list[Task] = []
    for task in federation.tasks:
        if not task.pinned:
            batch.append(task)
            continue
        home = next(
            i
            for i, (c, gpu) in enumerate(nodes)
            if c == task.home and gpu == bool(task.gpu_milli) and fits(i, task)
        )
        take(home, task, 1)
    events: list[tuple[float, int, int, int]] = [(task.arrival, 0, k, -1) for k, task in enumerate(batch)]
    heapq.heapify(events)
    waiting: list[int] = []
    end = 0.0
    while events:
        now, kind, k, node = heapq.heappop(events)
        if kind == 0:
            waiting.append(k)
        else:
            take(node, batch[k], -1)
        if events and events[0][0] == now:
            continue  # everything that happens at this instant first
        waiting.sort(key=lambda k: (priority(batch[k]), k))
        still = []
        for k in waiting:
            task = batch[k]
            usable = [i for i, (_, gpu) in enumerate(nodes) if (task.gpu_milli or not gpu) and fits(i, task)]
            if not usable:
                still.append(k)
                continue
            chosen = min(usable, key=lambda i: (choose(task, free[i]), i))
            take(chosen, task, 1)
            end = max(end, now + task.run)
            heapq.heappush(events, (now + task.run, 1, k, chosen))
        waiting = still
    return end


def work(task: Task) -> float:
    return max(task.gpu_milli / 8000, task.cpu / 64000) * task.run


PRIORITIES: dict[str, Priority] = {
    "arrival": lambda task: task.arrival,
    "longest first": lambda task: -task.run,
    "largest work first": lambda task: -work(task),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=100)
    args = parser.parse_args()
    for seed in (int(text) for text in args.seeds.split(",")):
        # The bound the replay reports (the quickest policy to replay alongside it).
        bound = replay(seed_3x20(seed), ["home"], Settings(), "seed-3x20").lower_bound_makespan_s
        print(f"seed {seed}: lower bound {bound:,.0f} s")
        for name, priority in PRIORITIES.items():
            for choice, choose in CHOICES.items():
                value = makespan(seed, priority, choose)
                print(f"  {name}, {choice}: {value:,.0f} s ({value / bound:.3f}x)")
        if not args.trials:
            continue
        rng = random.Random(42)
        best = float("inf")
        for _ in range(args.trials):
            noise: dict[str, float] = {}

            def perturbed(task: Task, noise: dict[str, float] = noise, rng: random.Random = rng) -> float:
                if task.name not in noise:
                    noise[task.name] = rng.uniform(0.7, 1.3)
                return -work(task) * noise[task.name]

            best = min(best, makespan(seed, perturbed, best_fit))
        print(
            f"  best of {args.trials} perturbations (x0.7-1.3) of largest work first, best fit: "
            f"{best:,.0f} s ({best / bound:.3f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
