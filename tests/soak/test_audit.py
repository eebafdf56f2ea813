"""The soak's auditor: counts from the clusters' own journals and Airflow's task states.

Synthetic journals pin each rule; one test audits a real simulated cluster's journal over HTTP, as the
soak does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from airflow_provider_fedsched.sim import SimFederation, wait_for
from soak.audit import JOB_UID, Expectation, FaultWindow, Silence, TaskKey, audit, gangs, orphan_resets
from soak.clusters import Clusters
from soak.run import key_of

REGIONS = {"east": "cn-east-1", "west": "eu-west-1"}
ALLOWED = {"cn-data": ["cn-east-1"], "open": None}
LABEL = "fedsched-soak/task"


def pod(
    key: str,
    start: float | None,
    end: float | None,
    outcome: str | None,
    cluster: str = "east",
    exit_code: int | None = None,
    removed: float | None = 1000.0,
    running: bool = False,
    name: str | None = None,
    end_seen: dict[str, float] | None = None,
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "namespace": "soak",
        "name": name or f"{key.replace('.', '-')}-{start}-{cluster}",
        "uid": f"uid-{key}-{start}-{cluster}",
        "labels": {LABEL: key},
        "node": f"{cluster}-n1",
        "created_at": (start or 1.0) - 1,
        "started_at": start,
        "ended_at": end,
        "removed_at": removed,
        "phase": {"succeeded": "Succeeded", None: "Running"}.get(outcome, "Failed"),
        "outcome": outcome,
        "exit_code": exit_code if exit_code is not None else (0 if outcome == "succeeded" else None),
        "reason": "Evicted" if outcome == "evicted" else None,
        "running": running,
        "end_seen": end_seen or {},
    }


def journal(cluster: str, *pods: dict[str, Any], overcommits: list[Any] | None = None) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "observed_at": 2000.0,
        "pods": list(pods),
        "nodes": {f"{cluster}-n1": {"overcommits": overcommits or []}},
    }


def ti(task: str, index: int, state: str) -> dict[str, Any]:
    return {"task_id": task, "map_index": index, "state": state, "try_number": 1}


def run_audit(
    journals: list[dict[str, Any]],
    tis: list[dict[str, Any]],
    expectations: list[Expectation],
    marked: list[TaskKey] = (),  # type: ignore[assignment]
    logs: Mapping[TaskKey, str] | None = None,
    silences: list[Silence] = (),  # type: ignore[assignment]
    grace: float | None = None,
    nodes_deleted: list[str] = (),  # type: ignore[assignment]
) -> Any:
    return audit(
        journals,
        tis,
        expectations,
        REGIONS,
        ALLOWED,
        key_of,
        marked_failed=marked,
        logs=(lambda key: (logs or {}).get(key, "")),
        silences=silences,
        grace=grace,
        nodes_deleted=nodes_deleted,
    )


def test_a_clean_run_counts_every_success() -> None:
    result = run_audit(
        [
            journal("east", pod("t.0", 10, 20, "succeeded")),
            journal("west", pod("t.1", 12, 30, "succeeded", "west")),
        ],
        [ti("t", 0, "success"), ti("t", 1, "success")],
        [Expectation("t", 0), Expectation("t", 1)],
    )
    assert (result.tasks, result.succeeded, result.failed, result.lost) == (2, 2, 0, 0)
    assert (result.duplicates, result.leaked, result.sovereignty_violations, result.overcommits) == (
        0,
        0,
        0,
        0,
    )
    assert result.clean
    assert result.summary("local", 3, 4.25) == (
        "soak: executor=local ground=sim tasks=2 succeeded=2 failed=0 lost=0 duplicates=0 leaked=0 "
        "sovereignty_violations=0 failed_by_fault=0 faults=3 minutes=4.2"
    )
    assert "ground=testbed " in result.summary("local", 3, 4.25, "testbed")


def test_two_pods_that_both_succeeded_are_a_duplicate_even_when_preemptible() -> None:
    result = run_audit(
        [
            journal("east", pod("t.0", 10, 20, "succeeded")),
            journal("west", pod("t.0", 30, 50, "succeeded", "west")),
        ],
        [ti("t", 0, "success")],
        [Expectation("t", 0, preemptible=True)],
    )
    assert result.duplicates == 1 and not result.clean
    (line,) = [f.line() for f in result.findings if f.kind == "duplicate"]
    assert "both ran to Succeeded" in line and "east/soak/" in line and "west/soak/" in line


# The first pod ran 10..22 s on east-n1; the second was created at 29 s on west.
@pytest.mark.parametrize(
    ("silence", "end_seen", "duplicates"),
    [
        (Silence("east", None, 15, 60), {}, 0),  # east went silent while the first pod ran: a move
        (Silence("east", "east-n1", 15, 60), {}, 0),  # its node stopped answering: a move too
        # it ended 4 s before east went silent, and no client was sent its end: nobody could know
        (Silence("east", None, 26, 60), {}, 0),
        (Silence("east", None, 26, 60), {"fedsched-soak": 23.0}, 0),  # only the soak's own read saw it
        (Silence("east", None, 26, 60), {"fedsched-soak": 23.0, "OpenAPI-Generator": 25.5}, 1),  # known
        (Silence("east", None, 24, 60), {"OpenAPI-Generator": 22.5}, 1),  # known 1.5 s before
        (Silence("east", None, 24, 60), {"OpenAPI-Generator": 24.0}, 0),  # sent as the silence began
        (Silence("east", None, 15, 20), {}, 1),  # the second pod came after east answered again
        (Silence("east", "east-n2", 15, 60), {}, 1),  # another node's silence hid nothing of this pod
        (Silence("east", None, 9.5, 60), {}, 0),  # created before east went silent, started during it
        # east answered again at 40 s and a client read the first pod's end at 41 s, while the second
        # still ran: its result was known, and the second copy still finished the work (the soak's
        # sync_resumable[5])
        (Silence("east", None, 15, 40), {"OpenAPI-Generator": 41.0}, 1),
        (Silence("east", None, 15, 40), {"OpenAPI-Generator": 51.0}, 0),  # read after the second ended
        # read 0.4 s before the second copy ended: no task can act that fast (one poll interval, 2 s;
        # the CeleryExecutor soak at acc8f6d, deferred_resumable[20]); 2.5 s before: it could
        (Silence("east", None, 15, 40), {"OpenAPI-Generator": 49.6}, 0),
        (Silence("east", None, 15, 40), {"OpenAPI-Generator": 47.5}, 1),
    ],
)
def test_a_preemptible_move_away_from_a_silent_cluster_is_listed_not_counted(
    silence: Silence, end_seen: dict[str, float], duplicates: int
) -> None:
    result = run_audit(
        [
            journal("east", pod("t.0", 10, 22, "succeeded", end_seen=end_seen)),
            journal("west", pod("t.0", 30, 50, "succeeded", "west")),
        ],
        [ti("t", 0, "success")],
        [Expectation("t", 0, preemptible=True)],
        silences=[silence],
    )
    assert result.duplicates == duplicates and result.clean == (duplicates == 0)
    kinds = [f.kind for f in result.findings if f.kind in ("moved", "duplicate")]
    assert kinds == (["moved"] if duplicates == 0 else ["duplicate"])


def test_a_moved_copy_stopped_once_the_first_copy_s_result_was_read_is_no_duplicate() -> None:
    """The first pod ended unseen during east's silence; the second, created then, started after that
    end; east answered at 40 s, the first pod's end was read at 41 s and the second was stopped at 45 s
    (deleted, never Succeeded): the work ran to the end once."""
    result = run_audit(
        [
            journal("east", pod("t.0", 10, 22, "succeeded", end_seen={"OpenAPI-Generator": 41.0})),
            journal("west", pod("t.0", 30, 45, "deleted", "west")),
        ],
        [ti("t", 0, "success")],
        [Expectation("t", 0, preemptible=True)],
        silences=[Silence("east", None, 15, 40)],
    )
    assert result.duplicates == 0 and result.clean
    assert [f.kind for f in result.findings if f.kind in ("moved", "duplicate")] == []


def test_a_silence_is_no_excuse_for_a_task_that_is_not_preemptible() -> None:
    result = run_audit(
        [
            journal("east", pod("t.0", 10, 22, "succeeded")),
            journal("west", pod("t.0", 30, 50, "succeeded", "west")),
        ],
        [ti("t", 0, "success")],
        [Expectation("t", 0)],
        silences=[Silence("east", None, 15, 60)],
    )
    assert result.duplicates == 1


def test_a_pod_started_after_the_result_was_known_is_a_duplicate() -> None:
    result = run_audit(
        [journal("east", pod("t.0", 10, 20, "succeeded"), pod("t.0", 25, 27, "deleted"))],
        [ti("t", 0, "success")],
        [Expectation("t", 0)],
    )
    assert result.duplicates == 1
    assert "result was known" in result.findings[0].text


def test_overlapping_copies_are_a_duplicate_only_when_not_preemptible() -> None:
    journals = [
        journal("east", pod("t.0", 10, 40, "deleted")),
        journal("west", pod("t.0", 20, 50, "succeeded", "west")),
    ]
    plain = run_audit(journals, [ti("t", 0, "success")], [Expectation("t", 0)])
    moved = run_audit(journals, [ti("t", 0, "success")], [Expectation("t", 0, preemptible=True)])
    assert plain.duplicates == 1 and "same time" in plain.findings[0].text
    assert moved.duplicates == 0 and moved.clean


def test_a_pod_still_running_on_an_unreachable_node_overlaps_whatever_came_later() -> None:
    journals = [
        journal("east", pod("t.0", 10, None, "deleted", running=True)),
        journal("west", pod("t.0", 500, 520, "succeeded", "west")),
    ]
    result = run_audit(journals, [ti("t", 0, "success")], [Expectation("t", 0)])
    assert result.duplicates == 1 and result.leaked == 1
    assert any("still running" in f.text for f in result.findings if f.kind == "leaked")


def test_a_retry_after_an_eviction_or_own_failure_is_not_a_duplicate() -> None:
    result = run_audit(
        [
            journal(
                "east",
                pod("t.0", 10, 15, "evicted"),
                pod("t.0", 20, 30, "succeeded"),
                pod("f.0", 10, 12, "failed", exit_code=3),
                pod("f.0", 20, 22, "failed", exit_code=3),
            )
        ],
        [ti("t", 0, "success"), ti("f", 0, "failed")],
        [Expectation("t", 0), Expectation("f", 0, expect="exit", exit_code=3)],
    )
    assert (result.duplicates, result.succeeded, result.failed, result.unexplained) == (0, 1, 1, 0)
    assert "its own exit code 3" in next(f.text for f in result.findings if f.kind == "failed")


def test_leaks_sovereignty_and_overcommit() -> None:
    over = [
        {"at": 15.0, "resources": {"cpu": {"used": "3", "allocatable": "2"}}, "pods": ["soak/a", "soak/b"]}
    ]
    result = run_audit(
        [
            journal("east", pod("t.0", 10, 20, "succeeded", removed=None), overcommits=over),
            journal("west", pod("t.1", 10, 20, "succeeded", "west")),
        ],
        [ti("t", 0, "success"), ti("t", 1, "success")],
        [Expectation("t", 0), Expectation("t", 1, datasets=("cn-data", "open"))],
    )
    assert (result.leaked, result.sovereignty_violations, result.overcommits) == (1, 1, 1)
    kinds = {f.kind: f.text for f in result.findings}
    assert "still in the API" in kinds["leaked"]
    assert "west (eu-west-1)" in kinds["sovereignty"] and "cn-east-1" in kinds["sovereignty"]
    assert "east/east-n1" in kinds["overcommit"]


def test_lost_tasks_and_explained_or_unexplained_failures() -> None:
    result = run_audit(
        [journal("east", pod("ok.0", 10, 20, "succeeded"), pod("marked.0", 10, 12, "deleted"))],
        [
            ti("ok", 0, "success"),
            ti("ghost", 0, "success"),
            ti("stuck", 0, "running"),
            ti("marked", 0, "failed"),
            ti("wait", 0, "failed"),
            ti("odd", 0, "failed"),
            ti("unstarted", 0, "failed"),
        ],
        [
            Expectation("ok", 0),
            Expectation("ghost", 0),
            Expectation("stuck", 0),
            Expectation("never", 0),
            Expectation("marked", 0),
            Expectation("wait", 0, datasets=("cn-data",), expect="wait-timeout"),
            Expectation("odd", 0),
            Expectation("unstarted", 0, datasets=("cn-data",), expect="wait-timeout"),
        ],
        marked=[("marked", 0)],
        logs={
            ("odd", 0): "line\nFederationError: no cluster answered\n",
            ("wait", 0): "ERROR no cluster could take the task within 60s: wait: quota\n",
            ("unstarted", 0): "INFO ::group::Pre Execute\n",
        },
    )
    assert (result.tasks, result.succeeded, result.failed, result.lost, result.unexplained) == (8, 1, 4, 3, 2)
    lost = {f.task: f.text for f in result.findings if f.kind == "lost"}
    assert "none of its pods ran to Succeeded" in lost[("ghost", 0)]
    assert "'running'" in lost[("stuck", 0)] and "no task instance" in lost[("never", 0)]
    failed = {f.task: f.text for f in result.findings if f.kind in ("failed", "unexplained")}
    assert "REST API" in failed[("marked", 0)]
    assert "wait timed out on purpose" in failed[("wait", 0)] and "['east']" in failed[("wait", 0)]
    assert "FederationError: no cluster answered" in failed[("odd", 0)]
    # Failed before the operator ran (no wait gave up in its log): not the wait that times out on purpose.
    assert "Pre Execute" in failed[("unstarted", 0)] and "on purpose" not in failed[("unstarted", 0)]
    assert not result.clean


def test_a_pod_running_long_after_its_task_ended_is_reported_but_does_not_fail_the_run() -> None:
    ended_at = "1970-01-01T00:01:40Z"  # 100 s
    result = run_audit(
        [journal("east", pod("t.0", 10, 90, "succeeded"), pod("m.0", 10, 500, "deleted"))],
        [
            {**ti("t", 0, "success"), "end_date": ended_at},
            {**ti("m", 0, "failed"), "end_date": ended_at},
        ],
        [Expectation("t", 0), Expectation("m", 0)],
        marked=[("m", 0)],
    )
    (outlived,) = [f for f in result.findings if f.kind == "outlived"]
    assert outlived.task == ("m", 0) and "ran 400s past the task's end (failed)" in outlived.text
    assert result.clean


def test_an_unexplained_failure_is_failed_by_fault_unless_a_silence_past_the_grace_hid_its_pod() -> None:
    result = run_audit(
        [
            journal("east", pod("short.0", 10, 20, "failed", exit_code=1)),
            journal("west", pod("short.0", 30, 40, "failed", "west", exit_code=1)),
            journal("north", pod("long.0", 10, 20, "failed", "north", exit_code=1)),
        ],
        [ti("short", 0, "failed"), ti("long", 0, "failed")],
        [Expectation("short", 0), Expectation("long", 0)],
        silences=[Silence("west", None, 35, 50), Silence("north", "north-n1", 15, 100)],
        grace=30,
    )
    # "long" had a pod on a node silent for 85 s (past the 30 s grace); "short"'s silences were within it.
    assert (result.unexplained, result.failed_by_fault) == (2, 1)
    assert "failed_by_fault=1 " in result.summary("local", 2, 1.0)


def stamped(*lines: tuple[float, str]) -> str:
    """A try's log as the soak reads it: ``timestamp LEVEL event`` lines, at the given epoch seconds."""
    from datetime import UTC, datetime

    return "\n".join(f"{datetime.fromtimestamp(at, UTC).isoformat()} {text}" for at, text in lines)


LOST_TRY = stamped(
    (100, "INFO ::group::Pre Execute"),
    (110, "INFO Attempt 1: launching pod soak/t-0 in cluster east (cpu=1, memory=256Mi)"),
    (160, "WARNING Attempt 1 in east ended: unreachable (no answer from https://east for 47s)"),
    (
        161,
        "ERROR Task failed with exception | FederationError: no answer from https://east for 47s; the pod "
        "may still run there, so the work is not started elsewhere (unreachable_grace 45s)",
    ),
    (162, "INFO ::group::Post Execute"),
)
API_FAILED_TRY = stamped(
    (200, "INFO ::group::Pre Execute"),
    (215, "ERROR Task failed with exception | AirflowRuntimeError: API_SERVER_ERROR: {'status_code': 500}"),
    (216, "INFO ::group::Post Execute"),
)
KILLED_TRY = stamped((240, "INFO ::group::Pre Execute"), (241, "INFO Worker startup parse complete"))
FAULTS = [
    FaultWindow("stop-apiserver", "east", 105, 217),
    FaultWindow("restart-database", "metadata database", 205, 215),
    FaultWindow("kill-worker", "worker-1", 245, 265),
]


def test_a_failure_whose_every_try_a_fault_ended_is_explained_and_no_failure_by_fault() -> None:
    """The CeleryExecutor test-bed soak at acc8f6d, ``sync_plain[26]``: try 1 lost in a member silent past
    the grace, try 2 failed by Airflow's API as the database restarted, try 3 in the worker SIGKILLed."""
    result = audit(
        [],
        [{**ti("t", 0, "failed"), "try_number": 3}],
        [Expectation("t", 0)],
        REGIONS,
        ALLOWED,
        key_of,
        logs=lambda key: KILLED_TRY,
        silences=[Silence("east", None, 105, 217)],
        grace=45,
        try_logs=lambda key: [LOST_TRY, API_FAILED_TRY, KILLED_TRY],
        faults=FAULTS,
    )
    assert (result.failed, result.unexplained, result.failed_by_fault) == (1, 0, 0)
    (failed,) = [f.text for f in result.findings if f.kind == "failed"]
    assert failed == (
        "each of its 3 tries ended by a fault: try 1 lost in east (silent 112s, past the 45s grace), "
        "try 2 failed by Airflow's API as the metadata database restarted, "
        "try 3 killed (kill-worker worker-1)"
    )
    assert result.clean


SCHEDULER_LOG = """\
1970-01-01T00:02:00.000000Z [info     ] Adopting or resetting orphaned tasks for active dag runs [x] loc=y
1970-01-01T00:02:10.500000Z [info     ] Reset the following 2 orphaned TaskInstances:
\t<TaskInstance: fedsched_soak.t manual__1970-01-01T00:00:00+00:00 map_index=0 [queued] ti_id=a>
\t<TaskInstance: fedsched_soak.other manual__1970-01-01T00:00:00+00:00 map_index=3 [running] ti_id=b> [x]
1970-01-01T00:02:11.000000Z [warning  ] Starting call to 'airflow.sdk.api.client.Client.request' [x] loc=y
"""
DEFERRED_TRY = stamped(
    (60, "INFO Try: deciding -> waiting (wait: no cluster can take it now)"),
    (61, "INFO ::group::Post Execute"),
    (62, "INFO Pausing task as DEFERRED."),
)


def audit_deferred_then_api_failed(resets: list[FaultWindow]) -> Any:
    """A failed task of two tries: one deferred (``DEFERRED_TRY``), one Airflow's API failed as the
    database restarted; ``resets``: the scheduler's orphan resets beside the run's faults."""
    return audit(
        [],
        [{**ti("t", 0, "failed"), "try_number": 2}],
        [Expectation("t", 0)],
        REGIONS,
        ALLOWED,
        key_of,
        logs=lambda key: API_FAILED_TRY,
        grace=45,
        try_logs=lambda key: [DEFERRED_TRY, API_FAILED_TRY],
        faults=[*FAULTS, *resets],
    )


def test_the_scheduler_s_orphan_resets_are_read_from_its_log_with_their_moment() -> None:
    assert orphan_resets(SCHEDULER_LOG) == [
        FaultWindow("orphan-reset", "scheduler", 130.5, 130.5, ("t", 0)),
        FaultWindow("orphan-reset", "scheduler", 130.5, 130.5, ("other", 3)),
    ]


def test_a_deferred_try_whose_resumption_the_scheduler_reset_as_an_orphan_is_explained() -> None:
    """The LocalExecutor test-bed soak at 1483d8e, ``vault_wait[3]``: try 1 deferred (waiting for room),
    its trigger fired, and the scheduler (its heartbeat late at load 47) reset the queued resumption as
    an orphan, so try 1 never ran again; try 2 failed as the metadata database restarted."""
    result = audit_deferred_then_api_failed(orphan_resets(SCHEDULER_LOG))
    assert (result.failed, result.unexplained, result.failed_by_fault) == (1, 0, 0)
    (failed,) = [f.text for f in result.findings if f.kind == "failed"]
    assert failed == (
        "each of its 2 tries ended by a fault: try 1 deferred, then reset as an orphan by Airflow's "
        "scheduler (its resumption never ran), try 2 failed by Airflow's API as the metadata database "
        "restarted"
    )


@pytest.mark.parametrize(
    ("case", "resets"),
    [
        ("no reset of this task", [FaultWindow("orphan-reset", "scheduler", 130.5, 130.5, ("other", 0))]),
        # A reset before the try's last line: the try went on after it, the reset did not end it.
        ("reset before it deferred", [FaultWindow("orphan-reset", "scheduler", 61.5, 61.5, ("t", 0))]),
        # A reset after the next try began was that try's, not this one's.
        ("reset of the next try", [FaultWindow("orphan-reset", "scheduler", 250, 250, ("t", 0))]),
    ],
)
def test_a_deferred_try_without_a_reset_that_ended_it_stays_unexplained(
    case: str, resets: list[FaultWindow]
) -> None:
    result = audit_deferred_then_api_failed(resets)
    assert result.unexplained == 1, case


@pytest.mark.parametrize(
    ("case", "tries", "silence_end"),
    [
        # East came back within the grace: the try should have carried on.
        ("silence within the grace", [LOST_TRY], 140),
        # The log stopped long before the kill: the try hung first, and the kill does not explain that.
        ("hung before the kill", [stamped((150, "INFO ::group::Pre Execute"))], 217),
        # Airflow's API failed the try long after the database was back.
        (
            "API error after the restart",
            [API_FAILED_TRY.replace("1970-01-01T00:03:35", "1970-01-01T00:06:35")],
            217,
        ),
        # One try of two was not ended by a fault.
        (
            "one try unexplained",
            [
                LOST_TRY,
                stamped(
                    (300, "ERROR Task failed with exception | KeyError: x"),
                    (301, "INFO ::group::Post Execute"),
                ),
            ],
            217,
        ),
    ],
)
def test_a_try_no_fault_ended_leaves_the_failure_unexplained(
    case: str, tries: list[str], silence_end: float
) -> None:
    result = audit(
        [],
        [ti("t", 0, "failed")],
        [Expectation("t", 0)],
        REGIONS,
        ALLOWED,
        key_of,
        logs=lambda key: tries[-1],
        silences=[Silence("east", None, 105, silence_end)],
        grace=45,
        try_logs=lambda key: tries,
        faults=FAULTS,
    )
    assert result.unexplained == 1, case
    assert not result.clean


def test_a_gang_that_no_longer_fits_after_a_node_of_its_only_allowed_member_was_deleted_is_explained() -> (
    None
):
    """The full test-bed CeleryExecutor soak: a fault deleted a node of west, the only member
    ``eu-customers`` allows; ``gang_job[0]``'s gang could never fit there again: impossible, not a failure
    the provider owes."""
    impossible = (
        "ERROR Task failed with exception\nFederationError: no member cluster can ever run this task: "
        "impossible: no cluster could ever take this task (0/2 clusters: 1 Sovereignty, 1 GangCapacity)\n"
    )
    tis = [ti("gang", 0, "failed"), ti("gang", 1, "failed")]
    expected = [Expectation("gang", 0, datasets=("eu-data",)), Expectation("gang", 1, datasets=("eu-data",))]
    logs = {("gang", 0): impossible, ("gang", 1): impossible}
    allowed = {**ALLOWED, "eu-data": ["eu-west-1"]}
    result = audit(
        [], tis, expected, REGIONS, allowed, key_of, logs=lambda k: logs[k], nodes_deleted=["west"]
    )
    assert (result.failed, result.unexplained, result.failed_by_fault) == (2, 0, 0)
    failed = {f.task: f.text for f in result.findings if f.kind == "failed"}
    assert "no longer fits the only member(s) its data allows (west)" in failed[("gang", 0)]
    # the same failure with no node deleted there is the provider's to explain
    again = audit([], tis, expected, REGIONS, allowed, key_of, logs=lambda k: logs[k], nodes_deleted=["east"])
    assert (again.unexplained, again.failed_by_fault) == (2, 2)


def gang_pod(key: str, job: str, index: int, start: float, end: float, outcome: str) -> dict[str, Any]:
    found = pod(key, start, end, outcome, name=f"{job}-{index}")
    found["uid"] = f"{job}-{index}"
    found["node"] = f"east-n{index}"
    found["labels"] = {LABEL: key, JOB_UID: f"uid-{job}", "batch.kubernetes.io/job-name": job}
    return found


def test_a_gang_jobs_pods_are_one_copy_of_the_work_and_two_gangs_that_succeeded_are_a_duplicate() -> None:
    one = [gang_pod("g.0", "g-a", i, 10 + i, 40 + i, "succeeded") for i in range(3)]
    (entry,) = gangs(one)
    assert (entry["started_at"], entry["ended_at"], entry["outcome"]) == (10, 42, "succeeded")
    assert entry["node"] == "east-n0,east-n1,east-n2" and entry["name"] == "g-a (Job, 3 pods)"
    result = run_audit([journal("east", *one)], [ti("g", 0, "success")], [Expectation("g", 0)])
    assert (result.succeeded, result.duplicates, result.pods) == (1, 0, 1)
    # A gang with one pod that failed is a failed copy; a second gang after it is a retry, no duplicate.
    failed = [gang_pod("g.1", "g-b", 0, 10, 20, "succeeded"), gang_pod("g.1", "g-b", 1, 10, 15, "failed")]
    again = [gang_pod("g.1", "g-c", i, 50, 60, "succeeded") for i in range(2)]
    twice = [gang_pod("g.2", "g-d", i, 10, 20, "succeeded") for i in range(2)] + [
        gang_pod("g.2", "g-e", i, 30, 40, "succeeded") for i in range(2)
    ]
    result = run_audit(
        [journal("east", *failed, *again, *twice)],
        [ti("g", 1, "success"), ti("g", 2, "success")],
        [Expectation("g", 1), Expectation("g", 2)],
    )
    (duplicate,) = [f for f in result.findings if f.kind == "duplicate"]
    assert duplicate.task == ("g", 2) and "g-d (Job, 2 pods)" in duplicate.text
    assert result.duplicates == 1


@pytest.mark.sim
def test_the_auditor_reads_a_simulated_clusters_journal_over_http(tmp_path: Any) -> None:
    """Two pods of one task both run to Succeeded on a real simulated cluster: one duplicate; a third pod
    that is never deleted is left behind; the auditor sees them through the control endpoint."""
    config = {
        "time_scale": 0.2,
        "clusters": [{"name": "east", "region": "cn-east-1", "namespaces": ["soak"]}],
    }
    with SimFederation(config, state_dir=tmp_path / "sim") as fed:
        east = fed["east"]
        for name, key in (("first", "t.0"), ("second", "t.0"), ("left", "t.1")):
            east.create_pod(
                "soak",
                {
                    "metadata": {"name": name, "labels": {LABEL: key}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": "busybox"}]},
                },
            )
        for name in ("first", "second", "left"):
            east.wait_for_phase("soak", name, "Succeeded")
        for name in ("first", "second"):
            east.delete_pod("soak", name)
            east.wait_for_gone("soak", name)
        clusters = Clusters(tmp_path / "sim", config)
        clusters.control_url = fed.control_url
        clusters.urls = {"east": east.url}
        clusters.tokens = {"east": east.token}
        report = wait_for(lambda: clusters.journal("east", selector=LABEL), message="journal")
        result = run_audit(
            [report],
            [ti("t", 0, "success"), ti("t", 1, "success")],
            [Expectation("t", 0), Expectation("t", 1)],
        )
    assert (result.pods, result.succeeded, result.duplicates, result.leaked) == (3, 2, 1, 1)


def test_a_gang_deleted_before_one_of_its_pods_was_scheduled_ended_when_its_running_pods_did() -> None:
    """Full test-bed soak finding (``gang_job[5]``): a gang whose third pod was never scheduled was deleted
    within 9 s with its two running pods; the pod that never ran has no end, and the auditor took the
    whole gang for still running, so the retry's gang 800 s later was "two copies at the same time"."""
    deleted = [gang_pod("g.0", "g-a", i, 71, 80, "deleted") for i in range(2)]
    unscheduled = gang_pod("g.0", "g-a", 2, 0, 0, "deleted")
    unscheduled.update(started_at=None, ended_at=None, outcome=None, node=None, removed_at=79.0)
    retry = [gang_pod("g.0", "g-b", i, 897, 912, "succeeded") for i in range(3)]
    (first,) = gangs([*deleted, unscheduled])
    assert first["ended_at"] == 80
    result = run_audit(
        [journal("east", *deleted, unscheduled, *retry)], [ti("g", 0, "success")], [Expectation("g", 0)]
    )
    assert (result.succeeded, result.duplicates) == (1, 0), [f.text for f in result.findings]
    assert not [f for f in result.findings if f.kind == "outlived"]
    # A pod that never started but is still in the API may start yet: the gang is not over.
    pending = {**unscheduled, "removed_at": None}
    (still,) = gangs([*deleted, pending])
    assert still["ended_at"] is None
