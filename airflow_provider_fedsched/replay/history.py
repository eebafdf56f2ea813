"""The project's own placement history as a replayable pod list (``fedsched history export``).

Each placement record (one per task instance, the latest try's, as the operator writes it to XCom)
becomes one pod: its request (resources, datasets, preemptible) from the record's ``request``, its
arrival when the try started, its run time from the attempt that finished (running to end), its home
the cluster first chosen for it. Records still running or waiting, that never ran, or written before
records carried their request are left out and counted, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from airflow_provider_fedsched.federation.record import PlacementRecord
from airflow_provider_fedsched.federation.resources import CPU, GPU, MEMORY
from airflow_provider_fedsched.replay.topology import GPU_MILLI
from airflow_provider_fedsched.replay.workload import Task

__all__ = ["HistoryExport", "tasks_from_records"]

MIB = 2**20


@dataclass(slots=True)
class HistoryExport:
    tasks: list[Task]
    skipped: dict[str, int] = field(default_factory=dict)
    """Why records were left out -> how many."""


def _name(record: PlacementRecord) -> str:
    suffix = f"[{record.map_index}]" if record.map_index >= 0 else ""
    return f"{record.dag_id}.{record.task_id}{suffix}@{record.run_id}"


def tasks_from_records(records: Iterable[PlacementRecord]) -> HistoryExport:
    kept: list[tuple[PlacementRecord, float]] = []
    phases: dict[int, str] = {}
    skipped: dict[str, int] = {}

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for record in records:
        if record.request is None:
            skip("no request in the record (written before records carried it)")
            continue
        finished = [a for a in record.attempts if a.outcome in ("succeeded", "failed") and a.ended_at]
        if not finished:
            skip("still running or waiting, or never ran")
            continue
        last = finished[-1]
        assert last.ended_at is not None
        run = (last.ended_at - (last.running_at or last.started_at)).total_seconds()
        kept.append((record, max(0.0, run)))
        phases[id(record)] = "Succeeded" if last.outcome == "succeeded" else "Failed"
    if not kept:
        return HistoryExport([], skipped)
    origin = min(record.started_at for record, _ in kept)
    tasks = []
    for record, run in sorted(kept, key=lambda item: (item[0].started_at, _name(item[0]))):
        request = record.request or {}
        resources = request.get("resources") or {}
        gpu_milli = int(resources.get(GPU, 0)) * 1000 + int(resources.get(GPU_MILLI, 0))
        tasks.append(
            Task(
                name=_name(record),
                arrival=(record.started_at - origin).total_seconds(),
                run=run,
                cpu=int(resources.get(CPU, 0)),
                memory_mib=math.ceil(int(resources.get(MEMORY, 0)) / MIB),
                gpu_milli=gpu_milli,
                qos="BE" if request.get("preemptible") else "Burstable",
                home=record.attempts[0].cluster,
                datasets=tuple(request.get("datasets") or ()),
                phase=phases[id(record)],
            )
        )
    return HistoryExport(tasks, skipped)
