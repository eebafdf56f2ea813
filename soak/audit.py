"""The auditor: what really ran, from the clusters' own records, against what Airflow says.

It never reads the provider's records (placement XComs, shared state, pod annotations it writes). Its
inputs are each simulated cluster's execution journal (every pod that ran there: node, start, end,
outcome, exit code; every node's load), the task instances from Airflow's REST API, and what the load
meant each task to do (``Expectation``: its datasets, whether it may move, how it is meant to end).

It counts, per task (one ``(dag, task, map_index, run)``):

- ``succeeded``: Airflow says success and one of its pods ran to Succeeded;
- ``failed``: Airflow says failed; each is explained (its own non-zero exit, a wait that timed out on
  purpose, a fault that marked it failed, or every one of its tries ended by a fault that the contract
  does not ask the provider to outlast: its cluster silent past the grace, Airflow's own API failing the
  try as the metadata database restarted, its worker or supervisor SIGKILLed) or reported as unexplained;
- ``lost``: anything else (not finished, skipped, removed, never created, or success without any pod
  that succeeded);
- ``duplicates``: pods of one task that both ran, other than a preemptible move (docs/reliability.md,
  "ran twice"): two that ran to Succeeded, one started after another had Succeeded, or, for a task that
  is not preemptible, two whose containers ran at the same time. A preemptible move is a pair of a
  preemptible task whose earlier pod existed (was created) before its cluster (or its node) stopped
  answering and whose end no client of the cluster had been sent before that moment (the journal's
  ``end_seen``: running then, or ended unseen), and whose later pod was created while the cluster still
  did not answer (``silences``): the task moved, as preemptible allows, and the old pod was fenced; a
  later pod stopped before it finished is never counted, and a pair that both ran to Succeeded is listed
  (``moved``) without failing the run, unless a client was sent the earlier pod's end once its cluster
  answered again while the later one still ran for more than ``REACTION_SECONDS`` (the task could then
  know the result and had to stop the later copy). A pod whose end some client of the cluster (other
  than this soak's own, ``SOAK_AGENT``) had been sent before the silence is no such move: its result
  could be known, and a later pod duplicates it;
- ``leaked``: pods of the load still in a cluster (not removed from its API, or still running on a node);
- ``sovereignty_violations``: pods that ran in a cluster whose region one of the task's datasets forbids;
- node over-commit: moments when a node's admitted pods requested more than its allocatable.

It also prints, without failing the run, each pod that kept running more than ``OUTLIVE_TOLERANCE``
seconds after its task had ended in Airflow (``outlived``): the contract lets a pod on a cluster that
stopped answering outlive a try that gave up on it, until the cluster answers again.

The module is pure (no I/O): ``soak.run`` collects its inputs; other harnesses can reuse it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TaskKey = tuple[str, int]
TERMINAL_STATES = ("success", "failed")
FINDING_ORDER = (
    *("duplicate", "leaked", "sovereignty", "overcommit"),
    *("lost", "unexplained", "failed", "outlived", "moved"),
)
WAIT_GAVE_UP = "no cluster could take the task within"
IMPOSSIBLE = "no member cluster can ever run this task"
GANG_NEVER_FITS = "GangCapacity"
"""What the operator's log says when a try's wait for a compliant cluster ran out (its ``wait_timeout``):
a ``wait-timeout`` task is explained only with it, never by the mere absence of pods (Airflow can fail a
try before the operator runs at all)."""
SOAK_AGENT = "fedsched-soak"
"""The User-Agent of the soak's own API calls (fault targets): what they are sent tells the provider
nothing, so it never makes a pod's end known."""
MOVED = "a preemptible move: its cluster stopped answering before anybody was sent the first pod's end"
KNOWN_WHILE_RUNNING = (
    "both ran to Succeeded, the second after the first one's end was read once its cluster answered again"
)
REACTION_SECONDS = 2.0
"""How soon a task can act on a pod's end that some client of the provider was sent: its trigger (or its
worker) looks at its pods, fenced ones included, once per poll interval (KubernetesPodOperator's default,
the soak's tasks': 2 s). A moved copy that ends within this time of that read could not have been
stopped (the CeleryExecutor soak at acc8f6d: 0.39 s)."""
OUTLIVE_TOLERANCE = 60.0
"""Seconds a pod may still run after its task ended in Airflow (a heartbeat and a deletion)."""


@dataclass(frozen=True)
class Expectation:
    task_id: str
    map_index: int
    datasets: tuple[str, ...] = ()
    preemptible: bool = False
    expect: str = "succeed"
    """``succeed``; ``exit`` (meant to fail by its own non-zero exit); ``wait-timeout`` (meant to fail
    because it waits for a cluster that never has room, until its wait timeout)."""
    exit_code: int = 0

    @property
    def key(self) -> TaskKey:
        return (self.task_id, self.map_index)


@dataclass(frozen=True)
class PodRun:
    """One journal entry (the sim's ``controllers/journal.py`` ``PodRun``), reduced to what is audited."""

    cluster: str
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    node: str | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    removed_at: float | None
    phase: str
    outcome: str | None
    exit_code: int | None
    reason: str | None
    running: bool
    end_seen_at: float | None = None
    """When a client of the cluster other than the soak itself was first sent the pod ended."""

    @classmethod
    def from_journal(cls, entry: Mapping[str, Any]) -> PodRun:
        return cls(
            cluster=str(entry["cluster"]),
            namespace=str(entry["namespace"]),
            name=str(entry["name"]),
            uid=str(entry["uid"]),
            labels=dict(entry.get("labels") or {}),
            node=entry.get("node"),
            created_at=float(entry["created_at"]),
            started_at=entry.get("started_at"),
            ended_at=entry.get("ended_at"),
            removed_at=entry.get("removed_at"),
            phase=str(entry.get("phase") or ""),
            outcome=entry.get("outcome"),
            exit_code=entry.get("exit_code"),
            reason=entry.get("reason"),
            running=bool(entry.get("running")),
            end_seen_at=min(
                (
                    float(at)
                    for agent, at in (entry.get("end_seen") or {}).items()
                    if not str(agent).startswith(SOAK_AGENT)
                ),
                default=None,
            ),
        )

    @property
    def ran(self) -> bool:
        return self.started_at is not None

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    def ended_by(self, at: float | None = None) -> float:
        """When its containers stopped (``at``, the audit's time, when they still run)."""
        if self.ended_at is not None:
            return float(self.ended_at)
        return float("inf") if at is None else at

    def describe(self, origin: float = 0.0) -> str:
        start = f"{self.started_at - origin:.0f}s" if self.started_at is not None else "-"
        end = f"{self.ended_at - origin:.0f}s" if self.ended_at is not None else "still running"
        exit_code = f" exit {self.exit_code}" if self.exit_code is not None else ""
        reason = f" ({self.reason})" if self.reason else ""
        return (
            f"{self.cluster}/{self.namespace}/{self.name} on {self.node or '-'} ran {start}..{end} "
            f"{self.outcome or self.phase}{exit_code}{reason}"
        )


@dataclass(frozen=True)
class Silence:
    """A cluster's API (``node`` None) or one node that did not answer from ``start`` to ``end``."""

    cluster: str
    node: str | None
    start: float
    end: float

    def moved(self, earlier: PodRun, later: PodRun) -> bool:
        """``later`` was created while this silence hid ``earlier`` (created before it began), whose end
        nobody had been sent when the silence began."""
        if earlier.cluster != self.cluster or (self.node is not None and earlier.node != self.node):
            return False
        unseen = earlier.end_seen_at is None or earlier.end_seen_at >= self.start
        return earlier.created_at < self.start and unseen and self.start <= later.created_at <= self.end

    def known_while_running(self, earlier: PodRun, later: PodRun) -> bool:
        """Once the cluster answered again, a client was sent ``earlier``'s end while ``later`` still ran,
        and ran on for more than :data:`REACTION_SECONDS`: the task could know ``earlier``'s result in
        time and had to stop ``later``."""
        seen = earlier.end_seen_at
        return seen is not None and self.end < seen and seen + REACTION_SECONDS < later.ended_by()


@dataclass(frozen=True)
class FaultWindow:
    """A fault the soak applied, as a try's end is weighed against it: ``kind`` and ``target`` (a
    cluster, a node, a worker), from ``start`` to ``end`` (the journals' wall-clock time), and the task
    it acted on directly, if any."""

    kind: str
    target: str
    start: float
    end: float
    task: TaskKey | None = None


@dataclass(frozen=True)
class Finding:
    kind: str
    """``duplicate``, ``leaked``, ``sovereignty``, ``overcommit``, ``lost``, ``failed``, ``unexplained``."""
    task: TaskKey | None
    text: str

    def line(self) -> str:
        who = f"{self.task[0]}[{self.task[1]}]: " if self.task else ""
        return f"{self.kind}: {who}{self.text}"


@dataclass
class Audit:
    tasks: int = 0
    succeeded: int = 0
    failed: int = 0
    lost: int = 0
    duplicates: int = 0
    leaked: int = 0
    sovereignty_violations: int = 0
    overcommits: int = 0
    unexplained: int = 0
    failed_by_fault: int = 0
    """Unexplained failures of tasks none of whose pods sat in a cluster (or on a node) that a fault
    kept silent for longer than ``unreachable_grace``: the cluster came back within the grace, so the
    contract says the task should have carried on (goal 0; counted in ``unexplained`` too)."""
    pods: int = 0
    findings: list[Finding] = field(default_factory=list)

    def add(self, kind: str, task: TaskKey | None, text: str) -> None:
        self.findings.append(Finding(kind, task, text))

    @property
    def clean(self) -> bool:
        """The acceptance: nothing lost, run twice, left behind or misplaced; every failure explained."""
        return (
            not (
                self.lost or self.duplicates or self.leaked or self.sovereignty_violations or self.overcommits
            )
            and not self.unexplained
        )

    def summary(self, executor: str, faults: int, minutes: float, ground: str = "sim") -> str:
        return (
            f"soak: executor={executor} ground={ground} tasks={self.tasks} succeeded={self.succeeded} "
            f"failed={self.failed} lost={self.lost} duplicates={self.duplicates} leaked={self.leaked} "
            f"sovereignty_violations={self.sovereignty_violations} failed_by_fault={self.failed_by_fault} "
            f"faults={faults} minutes={minutes:.1f}"
        )

    def lines(self) -> list[str]:
        order = FINDING_ORDER
        found = sorted(
            self.findings, key=lambda f: (order.index(f.kind) if f.kind in order else 99, f.task or ("", 0))
        )
        return [f.line() for f in found] + [
            f"audit: {self.pods} pods of the load in the journals; node over-commits {self.overcommits}; "
            f"failures explained {self.failed - self.unexplained}/{self.failed}"
        ]


def _pairs(
    runs: list[PodRun], preemptible: bool, now: float, silences: Iterable[Silence] = ()
) -> Iterable[tuple[PodRun, PodRun, str]]:
    """Each later pod that duplicates an earlier one, with why (at most one reason per later pod);
    a preemptible move's pair comes with the reason ``MOVED``."""
    ran = sorted((r for r in runs if r.ran), key=lambda r: (r.started_at, r.uid))
    silences = list(silences)
    for index, later in enumerate(ran):
        assert later.started_at is not None
        for earlier in ran[:index]:
            hiding = [s for s in silences if s.moved(earlier, later)] if preemptible else []
            if hiding:
                if earlier.succeeded and later.succeeded:
                    if all(s.known_while_running(earlier, later) for s in hiding):
                        yield earlier, later, KNOWN_WHILE_RUNNING
                        break
                    yield earlier, later, MOVED
                continue
            if earlier.succeeded and later.succeeded:
                yield earlier, later, "both ran to Succeeded"
                break
            if earlier.succeeded and earlier.ended_by(now) <= later.started_at:
                yield earlier, later, "started after the task's result was known (an earlier pod Succeeded)"
                break
            if not preemptible and earlier.ended_by(now) > later.started_at:
                yield earlier, later, "two copies of non-preemptible work ran at the same time"
                break


def audit(
    journals: Iterable[Mapping[str, Any]],
    task_instances: Iterable[Mapping[str, Any]],
    expectations: Iterable[Expectation],
    regions: Mapping[str, str],
    allowed_regions: Mapping[str, list[str] | None],
    key_of: Callable[[Mapping[str, str]], TaskKey | None],
    marked_failed: Iterable[TaskKey] = (),
    logs: Callable[[TaskKey], str] | None = None,
    now: float | None = None,
    origin: float = 0.0,
    silences: Iterable[Silence] = (),
    grace: float | None = None,
    nodes_deleted: Iterable[str] = (),
    try_logs: Callable[[TaskKey], list[str]] | None = None,
    faults: Iterable[FaultWindow] = (),
) -> Audit:
    """Audit one run. ``journals``: each cluster's journal report (``pods`` and ``nodes``);
    ``task_instances``: Airflow's REST API view (``task_id``, ``map_index``, ``state``, ``try_number``);
    ``key_of``: a pod's task from its labels (None: not the load's); ``marked_failed``: tasks a fault
    marked failed; ``logs``: a task's last try's log (to quote why it failed); ``origin``: time zero of
    the times printed; ``silences``: when the faults kept a cluster's API or a node from answering;
    ``grace``: the load's ``unreachable_grace`` (a failure behind a longer silence is no
    ``failed_by_fault``); ``nodes_deleted``: the clusters where a fault deleted a node for good;
    ``try_logs``: the logs of each try of a task, first to last, with their timestamps; ``faults``: every
    fault applied (a failure whose every try a fault ended is explained, :func:`ended_by_faults`)."""
    result = Audit()
    silences, faults = list(silences), list(faults)
    expected = {e.key: e for e in expectations}
    result.tasks = len(expected)
    runs: dict[TaskKey, list[PodRun]] = {key: [] for key in expected}
    observed = now
    for journal in journals:
        observed = max(observed or 0.0, float(journal.get("observed_at") or 0.0)) or observed
        for name, node in (journal.get("nodes") or {}).items():
            for event in node.get("overcommits") or []:
                result.overcommits += 1
                result.add(
                    "overcommit",
                    None,
                    f"{journal.get('cluster')}/{name} at {float(event['at']) - origin:.0f}s: "
                    f"{event['resources']} held by {', '.join(event['pods'])}",
                )
        for entry in gangs(journal.get("pods") or []):
            run = PodRun.from_journal(entry)
            key = key_of(run.labels)
            if key is None:
                continue
            result.pods += 1
            runs.setdefault(key, []).append(run)
    at = observed if observed is not None else float("inf")

    for key, pods in sorted(runs.items()):
        exp = expected.get(key)
        if exp is None:
            result.add("lost", key, f"{len(pods)} pod(s) of a task the load never asked for")
            continue
        for earlier, later, why in _pairs(pods, exp.preemptible, at, silences):
            kind = "moved" if why == MOVED else "duplicate"
            result.duplicates += kind == "duplicate"
            result.add(kind, key, f"{why}: {earlier.describe(origin)} | {later.describe(origin)}")
        for run in pods:
            if run.removed_at is None or run.running:
                result.leaked += 1
                where = (
                    "still in the API" if run.removed_at is None else "removed from the API, still running"
                )
                result.add("leaked", key, f"{run.describe(origin)}; {where} (phase {run.phase})")
            if run.ran and not _allowed(regions.get(run.cluster), exp.datasets, allowed_regions):
                result.sovereignty_violations += 1
                result.add(
                    "sovereignty",
                    key,
                    f"ran in {run.cluster} ({regions.get(run.cluster)}), datasets {list(exp.datasets)} "
                    f"allow {[allowed_regions.get(d) for d in exp.datasets]}: {run.describe(origin)}",
                )

    states = {(str(ti["task_id"]), int(ti.get("map_index", -1))): ti for ti in task_instances}
    marked = set(marked_failed)
    for key, exp in sorted(expected.items()):
        ti = states.get(key)
        state = str(ti.get("state")) if ti else None
        pods = runs.get(key, [])
        ended = _epoch(ti.get("end_date")) if ti and state in TERMINAL_STATES else None
        for run in pods:
            if ended is not None and run.ran and run.ended_by(at) > ended + OUTLIVE_TOLERANCE:
                result.add(
                    "outlived",
                    key,
                    f"ran {run.ended_by(at) - ended:.0f}s past the task's end ({state}): "
                    + run.describe(origin),
                )
        if state == "success":
            if any(p.succeeded for p in pods):
                result.succeeded += 1
            else:
                result.lost += 1
                result.add("lost", key, "Airflow says success but none of its pods ran to Succeeded")
        elif state == "failed":
            result.failed += 1
            log = logs(key) if logs else ""
            explanation = _explain(
                exp, pods, key in marked, regions, allowed_regions, log, set(nodes_deleted)
            )
            if explanation is None and try_logs is not None and grace is not None:
                explanation = ended_by_faults(key, try_logs(key), faults, silences, grace)
            if explanation is None:
                result.unexplained += 1
                excused = grace is not None and any(
                    s.end - s.start > grace and p.cluster == s.cluster and s.node in (None, p.node)
                    for s in silences
                    for p in pods
                )
                result.failed_by_fault += not excused
                said = _last_error(log)
                ran = "; ".join(p.describe(origin) for p in pods) or "no pod"
                result.add("unexplained", key, f"failed; pods: {ran}" + (f"; log: {said}" if said else ""))
            else:
                result.add("failed", key, explanation)
        else:
            result.lost += 1
            result.add("lost", key, f"ended in state {state!r}" if ti else "no task instance in Airflow")
    return result


JOB_UID = "batch.kubernetes.io/controller-uid"


def gangs(entries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Journal entries with each Job's pods as one entry: a gang is one copy of its task's work, which
    ran when its first pod started, ended when its last pod ended, succeeded when all of its pods did,
    and is gone when all of them are (a node per pod, in ``node``)."""
    out: list[Mapping[str, Any]] = []
    jobs: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        uid = (entry.get("labels") or {}).get(JOB_UID)
        if uid:
            jobs.setdefault(str(uid), []).append(entry)
        else:
            out.append(entry)
    for uid, pods in jobs.items():
        first = pods[0]
        starts = [p["started_at"] for p in pods if p.get("started_at") is not None]
        # A pod that never started and left the API never ran: it has no end, and it does not hold the
        # gang's end open (one never scheduled made a gang deleted at once look like it ran for ever).
        ends = [
            p.get("ended_at") for p in pods if p.get("started_at") is not None or p.get("removed_at") is None
        ]
        outcomes = {p.get("outcome") for p in pods}
        out.append(
            {
                **first,
                "name": (first.get("labels") or {}).get("batch.kubernetes.io/job-name", first["name"])
                + f" (Job, {len(pods)} pods)",
                "uid": uid,
                "node": ",".join(sorted({str(p.get("node") or "-") for p in pods})),
                "created_at": min(float(p["created_at"]) for p in pods),
                "started_at": min(starts) if starts else None,
                "ended_at": max(e for e in ends if e is not None) if ends and None not in ends else None,
                "removed_at": (
                    None
                    if any(p.get("removed_at") is None for p in pods)
                    else max(float(p["removed_at"]) for p in pods)
                ),
                "outcome": "succeeded" if outcomes == {"succeeded"} else next(iter(outcomes - {"succeeded"})),
                "exit_code": next(
                    (p["exit_code"] for p in pods if p.get("exit_code")), first.get("exit_code")
                ),
                "running": any(p.get("running") for p in pods),
                "end_seen": {
                    agent: max(float(p.get("end_seen", {}).get(agent, float("inf"))) for p in pods)
                    for agent in set().union(*(p.get("end_seen") or {} for p in pods))
                },
            }
        )
    return out


def _epoch(value: Any) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _allowed(region: str | None, datasets: Iterable[str], allowed: Mapping[str, list[str] | None]) -> bool:
    for dataset in datasets:
        regions = allowed.get(dataset)
        if regions is not None and region not in regions:
            return False
    return True


def _explain(
    exp: Expectation,
    pods: list[PodRun],
    marked: bool,
    regions: Mapping[str, str],
    allowed: Mapping[str, list[str] | None],
    log: str = "",
    shrunk: Collection[str] = (),
) -> str | None:
    if marked:
        return "marked failed from the REST API by the soak (a fault)"
    own = [p for p in pods if p.outcome == "failed" and p.exit_code not in (None, 0)]
    if exp.expect == "exit" and own and all(p.exit_code == exp.exit_code for p in own):
        return f"its own exit code {exp.exit_code} ({len(own)} pod(s): {own[-1].cluster}/{own[-1].name})"
    if exp.expect == "wait-timeout" and not any(p.ran for p in pods) and WAIT_GAVE_UP in log:
        where = sorted(c for c, r in regions.items() if _allowed(r, exp.datasets, allowed))
        return f"its wait timed out on purpose: no pod ran; its only allowed cluster(s) {where} had no room"
    # A deleted node is capacity gone for good (a kubelet would register its node again; kwok's do not):
    # a gang that no longer fits the only members its data allows is impossible, and fails at once.
    where = sorted(c for c, r in regions.items() if _allowed(r, exp.datasets, allowed))
    if IMPOSSIBLE in log and GANG_NEVER_FITS in log and where and set(where) <= set(shrunk):
        return (
            f"its gang no longer fits the only member(s) its data allows ({', '.join(where)}): a fault "
            "deleted a node there; impossible, failed at once"
        )
    return None


LOST_IN = re.compile(r"Attempt \d+ in (\S+) ended: unreachable")
GAVE_UP_ON = re.compile(r"may still run in (\S+), which does not answer")
NOT_STARTED_ELSEWHERE = "the work is not started elsewhere"
AIRFLOW_API_FAILED = "API_SERVER_ERROR"
TRY_FINISHED = "::group::Post Execute"
"""The Task SDK's last group of every try that ends in its own process (success or failure)."""
API_RECOVERY_SECONDS = 60.0
"""How long after the metadata database is back Airflow's API may still fail a request with it."""
KILL_SLACK_SECONDS = 2.0
KILLED_QUIET_SECONDS = 30.0
"""A killed try's log ends at the kill: its last line at most this long before it (a try whose log
stopped earlier hung before the kill, and the kill does not explain that)."""
KILLS = ("kill-worker", "kill-supervisor")
DEFERRED = "Pausing task as DEFERRED"
ORPHAN_RESET = "orphan-reset"
"""Not a fault the soak applies: Airflow's scheduler resetting task instances it takes for orphans (on a
loaded machine its own heartbeat lags), read from the scheduler's log (:func:`orphan_resets`)."""
_RESET_HEADER = re.compile(r"^(\S+) \[\w+\s*\] Reset the following \d+ orphaned TaskInstances:")
_RESET_TASK = re.compile(r"^\s+<TaskInstance: [^.\s]+\.(\S+) \S+ (?:map_index=(-?\d+) )?\[\w+\]")


def orphan_resets(scheduler_log: str) -> list[FaultWindow]:
    """Each task instance Airflow's scheduler reset as an orphan, at the moment it did (its log's
    "Reset the following N orphaned TaskInstances:" and the instances listed below it)."""
    found: list[FaultWindow] = []
    at: float | None = None
    for line in scheduler_log.splitlines():
        header = _RESET_HEADER.match(line)
        if header:
            at = _stamped(header.group(1))[0]
            continue
        listed = _RESET_TASK.match(line)
        if listed is None or at is None:
            at = None
            continue
        key = (listed.group(1), int(listed.group(2)) if listed.group(2) is not None else -1)
        found.append(FaultWindow(ORPHAN_RESET, "scheduler", at, at, key))
    return found


def ended_by_faults(
    key: TaskKey,
    logs: list[str],
    faults: Collection[FaultWindow],
    silences: Collection[Silence],
    grace: float,
) -> str | None:
    """Why a failed task's tries all ended, when each was ended by a fault the contract does not ask the
    provider to outlast; None when one try was not (that failure stays unexplained)."""
    starts = [_first_stamp(log) for log in logs]
    why = [
        _try_ended_by(key, log, faults, silences, grace, next_start)
        for log, next_start in zip(logs, [*starts[1:], None], strict=True)
    ]
    if not why or any(w is None for w in why):
        return None
    each = ", ".join(f"try {n} {w}" for n, w in enumerate(why, 1))
    return f"each of its {len(why)} tries ended by a fault: {each}"


def _first_stamp(log: str) -> float | None:
    return next((at for at, _ in map(_stamped, log.splitlines()) if at is not None), None)


def _try_ended_by(
    key: TaskKey,
    log: str,
    faults: Collection[FaultWindow],
    silences: Collection[Silence],
    grace: float,
    next_start: float | None = None,
) -> str | None:
    stamped = [(at, line) for at, line in map(_stamped, log.splitlines()) if at is not None]
    if not stamped:
        return None
    start, last = stamped[0][0], stamped[-1][0]
    # Lost: the try gave up on a cluster a fault kept silent for longer than the grace.
    if NOT_STARTED_ELSEWHERE in log or GAVE_UP_ON.search(log):
        silent = set(LOST_IN.findall(log)) | set(GAVE_UP_ON.findall(log))
        for s in silences:
            overlaps = s.start <= last and s.end >= start
            if s.node is None and s.cluster in silent and s.end - s.start > grace and overlaps:
                return f"lost in {s.cluster} (silent {s.end - s.start:.0f}s, past the {grace:.0f}s grace)"
    # Airflow's own API failed the try while its metadata database restarted.
    failed_at = [at for at, line in stamped if AIRFLOW_API_FAILED in line]
    for f in faults:
        if f.kind == "restart-database" and any(
            f.start <= at <= f.end + API_RECOVERY_SECONDS for at in failed_at
        ):
            return "failed by Airflow's API as the metadata database restarted"
    # Reset: it deferred, and Airflow's scheduler reset the task as an orphan after its log's last line and
    # before the next try began: its resumption never ran, so the provider never judged this try again.
    if DEFERRED in log:
        for f in faults:
            before_next = next_start is None or f.start <= next_start
            if f.kind == ORPHAN_RESET and f.task == key and last <= f.start and before_next:
                return "deferred, then reset as an orphan by Airflow's scheduler (its resumption never ran)"
    # Killed: its log ends, unfinished, at a SIGKILL of its worker (or of its own supervisor).
    if TRY_FINISHED not in log:
        for f in faults:
            if f.kind not in KILLS or (f.kind == "kill-supervisor" and f.task != key):
                continue
            ended_at_the_kill = f.start - KILLED_QUIET_SECONDS <= last <= f.start + KILL_SLACK_SECONDS
            if start <= f.start + KILL_SLACK_SECONDS and ended_at_the_kill:
                return f"killed ({f.kind} {f.target})"
    return None


def _stamped(line: str) -> tuple[float | None, str]:
    """A log line's leading ISO timestamp (epoch seconds), if it has one."""
    first, _, _ = line.partition(" ")
    try:
        return datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp(), line
    except ValueError:
        return None, line


def _last_error(log: str) -> str:
    """The last line of a log that reports an error (``ERROR ...``, an exception name), else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for marker in ("ERROR ", "FederationError", "AirflowException", "Error", "Traceback"):
        hits = [line for line in lines if marker in line]
        if hits:
            return hits[-1][:400]
    return lines[-1][:400] if lines else ""
