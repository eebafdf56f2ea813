"""One try of a federated task: its states, the transitions between them, and the signals that carry them.

A try (one Airflow try of FederatedKubernetesOperator or FederatedKubernetesJobOperator) moves through
the states of :class:`TryState` along the transitions of :data:`TRANSITIONS` (the table in
docs/operator.md, "The try as a state machine", is this one; a test keeps them equal). The operator enters
each state through :class:`TryStates`, which logs the transition with its reason and refuses one the table
does not hold: a path through the delivery contract nobody wrote down is a defect, not a new behaviour.

Two transitions cross several calls of the operator and travel as exceptions: :class:`ClusterLeft` (the
cluster could not take the work; the pod is gone and the cluster left: decide again within the try) and
:class:`Judged` (a fresh read of the pod found the cluster's failure: judge it). They are signals, not
errors, and have no root error class (docs/decisions.md, 25).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from airflow_provider_fedsched.kube.failures import ClusterFailure, api_refusal, chain

GONE_TIMEOUT = 60.0
"""Seconds to confirm that a left cluster's pod is gone before the next cluster is tried."""
LEFT_UNREAD = ("unreachable", "lost", "running")
"""Outcomes of attempts whose pods were left where nobody read their end (an earlier try's, or fenced)."""


class TryState(enum.StrEnum):
    STARTING = "starting"
    """Name, pod template, request and the try's record; an earlier try's pod looked for and adopted."""
    DECIDING = "deciding"
    """The federation decides where to run (a precomputed plan, or a fresh decision with a reservation)."""
    WAITING = "waiting"
    """No compliant cluster has room now: wait (or defer) until shared state changes the decision."""
    LAUNCHING = "launching"
    """The attempt is written down in the task's state, then its pod (or Job) is created."""
    RUNNING = "running"
    """The attempt runs: watched to its end by the worker, or by the pod trigger (deferred)."""
    LEAVING = "leaving"
    """The cluster cannot take the work: its pod is deleted and confirmed gone, the cluster left."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"


S = TryState
TRANSITIONS: Mapping[TryState, tuple[tuple[TryState, str], ...]] = {
    S.STARTING: (
        (S.RUNNING, "reattach to this try's attempt, or adopt an earlier try's pod"),
        (S.SUCCEEDED, "an earlier try's pod Succeeded (or its success was written down)"),
        (S.DECIDING, "nothing to reattach to or adopt"),
        (S.FAILED, "bad arguments; an earlier try's pod may still run where nobody answers"),
    ),
    S.DECIDING: (
        (S.LAUNCHING, "placed: a cluster holds the request"),
        (S.WAITING, "no compliant cluster has room now"),
        (S.RUNNING, "a member that did not answer the search for earlier pods answers now: adopted"),
        (S.SUCCEEDED, "a pod this task left in a silent cluster Succeeded meanwhile"),
        (S.FAILED, "impossible everywhere, or max_cluster_attempts used up"),
    ),
    S.WAITING: (
        (S.DECIDING, "shared state changed the decision, or the wait's check came"),
        (S.FAILED, "wait_timeout"),
    ),
    S.LAUNCHING: ((S.RUNNING, "the create was sent (or the pod was found created)"),),
    S.RUNNING: (
        (S.SUCCEEDED, "the pod (or Job) Succeeded; or a fenced copy did and its result was taken"),
        (S.LEAVING, "quota, unschedulable, eviction, preemption; a preemptible task's silent cluster"),
        (
            S.FAILED,
            "the task's own failure; the trigger failed; the cluster silent past unreachable_grace, or the "
            "pod not confirmed gone, when the task is not preemptible",
        ),
    ),
    S.LEAVING: ((S.DECIDING, "the pod is gone (or fenced) and the cluster left: decide again"),),
    S.SUCCEEDED: (),
    S.FAILED: (),
}
"""Every transition a try may take, with when it is taken (docs/operator.md renders this table)."""


class TryStates:
    """The state of one try in one process, entered along :data:`TRANSITIONS`.

    A resumed deferral starts again in ``STARTING`` (a new process, the same try): where it was is in
    the try's record, not here. A transition the table does not hold is logged as an error and taken all
    the same (the try's bookkeeping never fails a try); with ``strict`` (Airflow's ``unit_test_mode``, as
    the test suite runs) it raises, so a test that takes such a path fails."""

    def __init__(self, log: Any, strict: bool = False) -> None:
        self.state = TryState.STARTING
        self.path: list[TryState] = [TryState.STARTING]
        self.strict = strict
        self._log = log

    def enter(self, state: TryState, why: str = "") -> None:
        if state == self.state:
            return  # deciding again after a wait's check, a pod watched on, an end written twice
        if state not in {to for to, _ in TRANSITIONS[self.state]}:
            problem = (
                f"the try went from {self.state} to {state}, which operators/try_states.py does not hold"
            )
            if self.strict:
                raise RuntimeError(problem)
            self._log.error("%s", problem)
        self._log.info("Try: %s -> %s%s", self.state, state, f" ({why})" if why else "")
        self.state = state
        self.path.append(state)


class ClusterLeft(Exception):
    """The current cluster cannot run the work; its pod is gone: the next decision follows within the try."""

    def __init__(self, failure: ClusterFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class Judged(Exception):
    """The attempt was judged from a fresh read of its pod: the cluster's failure it carries."""

    def __init__(self, failure: ClusterFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def airflow_failed(exc: BaseException) -> bool:
    """Whether Airflow's own API failed the try's step (the Task SDK's error for an API server that answered
    with an error or not at all), not the pod or its cluster."""
    from airflow.sdk.exceptions import AirflowRuntimeError

    return any(isinstance(e, AirflowRuntimeError) for e in chain(exc))


def short_error(exc: BaseException) -> str:
    # An API refusal's first line is only "(403)": the server's message names what was refused.
    refused = api_refusal(exc)
    if refused:
        return refused
    return str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
