"""Workloads for the replay: nodes and pods, read from CSV in the Alibaba GPU trace's columns.

Nodes: ``sn, cpu_milli, memory_mib, gpu, model`` and optionally ``cluster`` (a member cluster's name).
Pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec, qos, pod_phase,
creation_time, deletion_time, scheduled_time`` (the trace) plus ``cluster`` (the home cluster a pod was
submitted to) and ``datasets`` (spec dataset names separated by ``;``), which ``fedsched history export``
writes. Every problem is a :class:`ReplayInputError` naming the file, line and column at fault.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from airflow_provider_fedsched.federation._errors import SpecError
from airflow_provider_fedsched.federation.documents import open_regular_file
from airflow_provider_fedsched.federation.limits import MAX_SECONDS

__all__ = [
    "MAX_COPIES",
    "MAX_CSV_BYTES",
    "MAX_CSV_INTEGER",
    "MAX_NODE_ROWS",
    "MAX_POD_ROWS",
    "MAX_TASKS",
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "POD_COLUMNS_OPTIONAL",
    "Node",
    "ReplayInputError",
    "Task",
    "TraceShaping",
    "check_seconds_option",
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

MAX_CSV_BYTES = 128 * 2**20
"""A nodes or pods file (the Alibaba trace's largest pod list is 0.6 MB)."""
MAX_NODE_ROWS = 100_000
MAX_POD_ROWS = 500_000
MAX_TASKS = 1_000_000
"""Pods of the replay once ``--copies`` has repeated the list."""
MAX_COPIES = 1_000
MAX_CSV_INTEGER = 10**12
"""Any number in a row: 10^9 cores in millicores, an exabyte in MiB, 30,000 years in seconds; sums of a
million of them stay exact in a float, and memory in bytes fits a Kubernetes quantity."""
_MAX_NUMBER_TEXT = 32
_T = TypeVar("_T")


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
    phase: str = "Succeeded"
    """How the pod ended (the trace's ``pod_phase``): a failed try also held its resources while it ran."""

    @property
    def online(self) -> bool:
        """A latency-sensitive service: its usage follows the tidal curve (see ``topology.Tide``)."""
        return self.qos == "LS"

    @property
    def preemptible(self) -> bool:
        """Best-effort work that checkpoints: a colocation policy may run it on reclaimable capacity."""
        return self.qos == "BE"


@contextlib.contextmanager
def _csv_rows(
    path: Path, required: Sequence[str], what: str, max_rows: int
) -> Iterator[tuple[list[str], Iterator[tuple[int, dict[str, str]]]]]:
    """The header and the rows of a CSV file as ``(line, row)``, read as they are used (a file is never held
    whole): only a regular file of at most :data:`MAX_CSV_BYTES`, at most ``max_rows`` rows."""
    try:
        binary = open_regular_file(path, f"{what}", MAX_CSV_BYTES)
    except SpecError as exc:
        raise ReplayInputError(str(exc)) from None
    with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as handle:
        lines = _bounded_lines(handle, path, what)
        reader = csv.DictReader(lines)
        header = [name.strip() for name in _read(lambda: reader.fieldnames, path, what) or []]
        missing = [column for column in required if column not in header]
        if missing:
            raise ReplayInputError(
                f"{what} file {path}: missing column(s) {', '.join(missing)} "
                f"(expected at least: {', '.join(required)})"
            )
        reader.fieldnames = header

        def rows() -> Iterator[tuple[int, dict[str, str]]]:
            for line in itertools.count(2):
                row = _read(lambda: next(reader, None), path, what)
                if row is None:
                    return
                if line - 1 > max_rows:
                    raise ReplayInputError(
                        f"{what} file {path} line {line}: more than the {max_rows:,} rows allowed"
                    )
                yield line, row

        yield header, rows()


def _bounded_lines(handle: io.TextIOWrapper, path: Path, what: str) -> Iterator[str]:
    """The file's lines, refusing it once it has given more than :data:`MAX_CSV_BYTES` characters (it may
    have grown since it was opened); a line is never read past that either."""
    total = 0
    while True:
        line = handle.readline(MAX_CSV_BYTES - total + 1)
        if not line:
            return
        total += len(line)
        if total > MAX_CSV_BYTES:
            raise ReplayInputError(f"{what} file {path}: more than {MAX_CSV_BYTES:,} bytes")
        yield line


def _read(step: Callable[[], _T], path: Path, what: str) -> _T:
    try:
        return step()
    except OSError as exc:
        raise ReplayInputError(f"{what} file {path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ReplayInputError(f"{what} file {path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise ReplayInputError(f"{what} file {path}: not CSV: {exc}") from None


def _integer(row: dict[str, str], column: str, where: str, default: int | None = None) -> int:
    """A whole number in ``0..MAX_CSV_INTEGER`` (``1000``, ``1000.0``, ``1e3``)."""
    raw = (row.get(column) or "").strip()
    if not raw and default is not None:
        return default
    if len(raw) > _MAX_NUMBER_TEXT:
        raise ReplayInputError(f"{where}: {column}: {raw[:20]!r}... is over {_MAX_NUMBER_TEXT} characters")
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
    if value > MAX_CSV_INTEGER:
        raise ReplayInputError(f"{where}: {column}: {raw} is more than {MAX_CSV_INTEGER:,}")
    return value


def read_nodes(path: str | Path) -> list[Node]:
    path = Path(path)
    with _csv_rows(path, NODE_COLUMNS, "nodes", MAX_NODE_ROWS) as (header, rows):
        return _nodes(path, header, rows)


def _nodes(path: Path, header: list[str], rows: Iterator[tuple[int, dict[str, str]]]) -> list[Node]:
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, row in rows:
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
    with _csv_rows(path, POD_COLUMNS, "pods", MAX_POD_ROWS) as (header, rows):
        return _pods(path, header, rows, cap_gpu_milli)


def _pods(
    path: Path, header: list[str], rows: Iterator[tuple[int, dict[str, str]]], cap_gpu_milli: bool
) -> list[Task]:
    timed = "creation_time" in header and "deletion_time" in header
    tasks: list[Task] = []
    seen: set[str] = set()
    for line, row in rows:
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
                phase=(row.get("pod_phase") or "").strip() or "Succeeded",
            )
        )
    if not tasks:
        raise ReplayInputError(f"pods file {path}: no pods")
    if not timed:
        tasks = [replace(task, arrival=float(position)) for position, task in enumerate(tasks)]
        tasks = [replace(task, run=-1.0) for task in tasks]  # shape_trace fills them in
    tasks.sort(key=lambda task: task.arrival)
    return tasks


def write_pods(path: str | Path | io.TextIOBase, tasks: Iterable[Task]) -> None:
    """Write tasks in the pod CSV columns (times relative to the first arrival), to a path or an open
    text file (which is closed after)."""
    with (
        path if isinstance(path, io.TextIOBase) else Path(path).open("w", newline="", encoding="utf-8")
    ) as handle:
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
                    task.phase,
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

    def check(self, pods: int = 1) -> None:
        """:class:`ReplayInputError` naming the option unless each is in range (``pods``: the list's)."""
        check_seconds_option(self.window, "--window")
        check_seconds_option(self.max_run, "--max-run", positive=True)
        if isinstance(self.copies, bool) or not isinstance(self.copies, int):
            raise ReplayInputError(f"--copies: expected a whole number, got {self.copies!r}")
        if not 1 <= self.copies <= MAX_COPIES:
            raise ReplayInputError(f"--copies: must be 1..{MAX_COPIES:,} (got {self.copies})")
        if pods * self.copies > MAX_TASKS:
            raise ReplayInputError(
                f"--copies: {self.copies:,} copies of {pods:,} pods are more than {MAX_TASKS:,} tasks"
            )


def check_seconds_option(value: float, option: str, *, positive: bool = False) -> float:
    """A number of seconds given to an option: finite, ``0..MAX_SECONDS`` (above 0 if ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReplayInputError(f"{option}: expected a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS or (positive and value == 0):
        low = "above 0" if positive else "0"
        raise ReplayInputError(
            f"{option}: {value!r} is not a number of seconds from {low} to {MAX_SECONDS:g}"
        )
    return float(value)


def shape_trace(tasks: Sequence[Task], shaping: TraceShaping, seed: int) -> list[Task]:
    """Apply :class:`TraceShaping`; pods without times get run times drawn (seeded) from a log-normal
    with the Alibaba default list's median (860 s)."""
    shaping.check(len(tasks))
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
