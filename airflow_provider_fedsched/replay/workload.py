"""Workloads for the replay: nodes and pods, read from CSV in the Alibaba GPU trace's columns.

Nodes: ``sn, cpu_milli, memory_mib, gpu, model`` and optionally ``cluster`` (a member cluster's name).
Pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec, qos, pod_phase,
creation_time, deletion_time, scheduled_time`` (the trace) plus ``cluster`` (the home cluster a pod was
submitted to) and ``datasets`` (spec dataset names separated by ``;``), which ``fedsched history export``
writes. Every problem is a :class:`ReplayInputError` naming the file, line and column at fault.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = [
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "POD_COLUMNS_OPTIONAL",
    "Node",
    "ReplayInputError",
    "Task",
    "TraceShaping",
    "read_nodes",
    "read_pods",
    "shape_trace",
    "write_pods",
]

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_COLUMNS_OPTIONAL = (
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
    "cluster",
    "datasets",
)
QOS_CLASSES = ("LS", "Burstable", "Guaranteed", "BE")


class ReplayInputError(ValueError):
    """A workload file or option the replay cannot use; the message names the file, line and column."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    cpu: int
    """Millicores."""
    memory_mib: int
    gpus: int
    model: str
    """GPU type ("" for a CPU node)."""
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    arrival: float
    """Seconds from the start of the replay."""
    run: float
    """Seconds of work."""
    cpu: int
    memory_mib: int
    gpu_milli: int
    """Thousandths of a GPU in total (``num_gpu x gpu_milli``): 460 is a shared GPU, 8000 eight GPUs."""
    gpu_spec: str = ""
    """GPU types allowed, ``|``-separated ("" = any)."""
    qos: str = "BE"
    home: str | None = None
    datasets: tuple[str, ...] = ()
    pinned: bool = False
    """Runs on its home cluster under every policy (an online service that belongs to that cluster)."""

    @property
    def online(self) -> bool:
        """A latency-sensitive service: its usage follows the tidal curve (see ``topology.Tide``)."""
        return self.qos == "LS"

    @property
    def preemptible(self) -> bool:
        """Best-effort work that checkpoints: a colocation policy may run it on reclaimable capacity."""
        return self.qos == "BE"


def _open_rows(path: Path, required: Sequence[str], what: str) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = [name.strip() for name in reader.fieldnames or []]
            missing = [column for column in required if column not in header]
            if missing:
                raise ReplayInputError(
                    f"{what} file {path}: missing column(s) {', '.join(missing)} "
                    f"(expected at least: {', '.join(required)})"
                )
            reader.fieldnames = header
            return header, list(reader)
    except OSError as exc:
        raise ReplayInputError(f"{what} file {path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ReplayInputError(f"{what} file {path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise ReplayInputError(f"{what} file {path}: not CSV: {exc}") from None


def _integer(row: dict[str, str], column: str, where: str, default: int | None = None) -> int:
    raw = (row.get(column) or "").strip()
    if not raw and default is not None:
        return default
    try:
        value = int(raw)
    except ValueError:
        try:
            number = float(raw)
        except ValueError:
            raise ReplayInputError(f"{where}: {column}: {raw!r} is not a number") from None
        if not math.isfinite(number) or number != int(number):
            raise ReplayInputError(f"{where}: {column}: {raw!r} is not a whole number") from None
        value = int(number)
    if value < 0:
        raise ReplayInputError(f"{where}: {column}: {value} is negative")
    return value


def read_nodes(path: str | Path) -> list[Node]:
    path = Path(path)
    header, rows = _open_rows(path, NODE_COLUMNS, "nodes")
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        where = f"nodes file {path} line {line}"
        name = (row.get("sn") or "").strip()
        if not name:
            raise ReplayInputError(f"{where}: sn: empty node name")
        if name in seen:
            raise ReplayInputError(f"{where}: sn: duplicate node '{name}'")
        seen.add(name)
        node = Node(
            name=name,
            cpu=_integer(row, "cpu_milli", where),
            memory_mib=_integer(row, "memory_mib", where),
            gpus=_integer(row, "gpu", where),
            model=(row.get("model") or "").strip(),
            cluster=(row.get("cluster") or "").strip() or None if "cluster" in header else None,
        )
        if node.cpu == 0:
            raise ReplayInputError(f"{where}: cpu_milli: a node needs some cpu")
        nodes.append(node)
    if not nodes:
        raise ReplayInputError(f"nodes file {path}: no nodes")
    return nodes


def read_pods(path: str | Path, *, cap_gpu_milli: bool = False) -> list[Task]:
    """Pods as tasks, in arrival order (creation time, then file order).

    A pod's run time is ``deletion_time - scheduled_time``, or ``deletion_time - creation_time`` for a
    pod the trace never scheduled (how long it was wanted), and at least one second. A file without
    time columns (``openb_pod_list_multigpu20.csv``) gets times from :func:`shape_trace`.

    ``cap_gpu_milli`` (the fragmentation protocol's reading): ``gpu_milli`` above 1000 counts as 1000, and
    a pod must share a GPU on one device only (``num_gpu`` 1), as the protocol's reference simulator
    requires, so that ``Task.gpu_milli`` tells the devices and the share on each.
    """
    path = Path(path)
    header, rows = _open_rows(path, POD_COLUMNS, "pods")
    timed = "creation_time" in header and "deletion_time" in header
    tasks: list[Task] = []
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        where = f"pods file {path} line {line}"
        name = (row.get("name") or "").strip()
        if not name:
            raise ReplayInputError(f"{where}: name: empty pod name")
        if name in seen:
            raise ReplayInputError(f"{where}: name: duplicate pod '{name}'")
        seen.add(name)
        num_gpu = _integer(row, "num_gpu", where)
        gpu_milli = _integer(row, "gpu_milli", where)
        if gpu_milli > 1000 and cap_gpu_milli:
            gpu_milli = 1000
        if gpu_milli > 1000:
            raise ReplayInputError(f"{where}: gpu_milli: {gpu_milli} is more than one GPU (1000)")
        if cap_gpu_milli and num_gpu > 1 and 0 < gpu_milli < 1000:
            raise ReplayInputError(
                f"{where}: gpu_milli: {gpu_milli} on each of {num_gpu} GPUs (num_gpu): a pod may share "
                "a GPU on one device only"
            )
        qos = (row.get("qos") or "").strip() or "BE"
        if qos not in QOS_CLASSES:
            raise ReplayInputError(f"{where}: qos: {qos!r} is not one of {', '.join(QOS_CLASSES)}")
        arrival, run = float(line), 0.0
        if timed:
            created = _integer(row, "creation_time", where)
            deleted = _integer(row, "deletion_time", where)
            scheduled = _integer(row, "scheduled_time", where, default=created)
            if deleted < scheduled:
                raise ReplayInputError(
                    f"{where}: deletion_time: {deleted} is before scheduled_time/creation_time {scheduled}"
                )
            arrival, run = float(created), float(max(1, deleted - scheduled))
        datasets = tuple(part.strip() for part in (row.get("datasets") or "").split(";") if part.strip())
        tasks.append(
            Task(
                name=name,
                arrival=arrival,
                run=run,
                cpu=_integer(row, "cpu_milli", where),
                memory_mib=_integer(row, "memory_mib", where),
                gpu_milli=num_gpu * gpu_milli if num_gpu else 0,
                gpu_spec=(row.get("gpu_spec") or "").strip(),
                qos=qos,
                home=(row.get("cluster") or "").strip() or None,
                datasets=datasets,
            )
        )
    if not tasks:
        raise ReplayInputError(f"pods file {path}: no pods")
    if not timed:
        tasks = [replace(task, arrival=float(position)) for position, task in enumerate(tasks)]
        tasks = [replace(task, run=-1.0) for task in tasks]  # shape_trace fills them in
    tasks.sort(key=lambda task: task.arrival)
    return tasks


def write_pods(path: str | Path, tasks: Iterable[Task]) -> None:
    """Write tasks in the pod CSV columns (times relative to the first arrival)."""
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*POD_COLUMNS, *POD_COLUMNS_OPTIONAL])
        for task in tasks:
            gpus = math.ceil(task.gpu_milli / 1000) if task.gpu_milli else 0
            per_gpu = task.gpu_milli // gpus if gpus else 0
            start = round(task.arrival)
            writer.writerow(
                [
                    task.name,
                    task.cpu,
                    task.memory_mib,
                    gpus,
                    per_gpu,
                    task.gpu_spec,
                    task.qos,
                    "Succeeded",
                    start,
                    start + round(task.run),
                    start,
                    task.home or "",
                    ";".join(task.datasets),
                ]
            )


@dataclass(frozen=True, slots=True)
class TraceShaping:
    """How a production trace becomes a replay of placement under contention (``docs/replay.md``).

    The Alibaba pod list was sampled so that all its pods fit the cluster at once; at its own pace (149
    days, about 1 % load) every sensible policy would place every pod on arrival and tie. The replay
    keeps each pod's shape, class and trace order, and:

    - ``window``: spreads the arrivals over this many seconds, keeping their order and relative gaps;
    - ``max_run``: caps run times (a few pods run for months, many censored at the end of the trace;
      uncapped, the makespan would be that one pod's run under any policy);
    - ``copies``: replays the list this many times in a row within the window (copy ``k`` of a pod is
      named ``<name>~k``), for more work than the federation holds at once.
    """

    window: float = 3600.0
    max_run: float = 3600.0
    copies: int = 1


def shape_trace(tasks: Sequence[Task], shaping: TraceShaping, seed: int) -> list[Task]:
    """Apply :class:`TraceShaping`; pods without times get run times drawn (seeded) from a log-normal
    with the Alibaba default list's median (860 s)."""
    if shaping.copies < 1:
        raise ReplayInputError(f"--copies: must be at least 1 (got {shaping.copies})")
    if shaping.window < 0 or shaping.max_run <= 0:
        raise ReplayInputError("--window must not be negative and --max-run must be positive")
    rng = random.Random(seed)
    runs = [
        task.run if task.run > 0 else max(1.0, rng.lognormvariate(math.log(860.0), 1.6)) for task in tasks
    ]
    first = min(task.arrival for task in tasks)
    span = max(task.arrival for task in tasks) - first
    slot = shaping.window / shaping.copies
    shaped: list[Task] = []
    for copy in range(shaping.copies):
        for task, run in zip(tasks, runs, strict=True):
            relative = (task.arrival - first) / span if span > 0 else 0.0
            shaped.append(
                replace(
                    task,
                    name=task.name if shaping.copies == 1 else f"{task.name}~{copy}",
                    arrival=copy * slot + relative * slot,
                    run=min(run, shaping.max_run),
                )
            )
    shaped.sort(key=lambda task: task.arrival)
    return shaped
