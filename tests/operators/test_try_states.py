"""The try's states and transitions (operators/try_states.py) and their table in docs/operator.md."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from airflow_provider_fedsched.operators.try_states import TRANSITIONS, TryState, TryStates

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def test_the_operator_doc_shows_exactly_the_transitions_of_the_module() -> None:
    section = DOC.read_text().split("### The try as a state machine", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| (.+) \|$", section, re.MULTILINE)
    documented = [(TryState(a), TryState(b), when) for a, b, when in rows]
    assert documented == [(a, b, when) for a, tos in TRANSITIONS.items() for b, when in tos]


def test_every_state_is_reached_and_every_path_ends_succeeded_or_failed() -> None:
    reached = {b for tos in TRANSITIONS.values() for b, _ in tos}
    assert reached | {TryState.STARTING} == set(TryState)
    assert TRANSITIONS[TryState.SUCCEEDED] == TRANSITIONS[TryState.FAILED] == ()
    # from every state an end is reachable: no try can be stuck in a loop the table allows no way out of
    ends = {TryState.SUCCEEDED, TryState.FAILED}
    for state in TryState:
        seen, frontier = {state}, [state]
        while frontier:
            for to, _ in TRANSITIONS[frontier.pop()]:
                if to not in seen:
                    seen.add(to)
                    frontier.append(to)
        assert seen & ends, state


def test_a_failover_within_the_try_is_a_path_of_the_table(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.try")
    states = TryStates(log, strict=True)
    path = ["deciding", "launching", "running", "leaving", "deciding", "launching", "running", "succeeded"]
    with caplog.at_level(logging.INFO, logger="test.try"):
        for state in path:
            states.enter(TryState(state), "because")
    assert states.path == [TryState.STARTING, *map(TryState, path)]
    assert "Try: running -> leaving (because)" in caplog.text


def test_a_transition_the_table_does_not_hold_fails_in_strict_mode_and_is_logged_otherwise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(RuntimeError, match="from starting to launching"):
        TryStates(logging.getLogger("test.try"), strict=True).enter(TryState.LAUNCHING)
    lenient = TryStates(logging.getLogger("test.try"))
    with caplog.at_level(logging.INFO, logger="test.try"):
        lenient.enter(TryState.LAUNCHING)
    assert lenient.state == TryState.LAUNCHING
    assert "does not hold" in caplog.text


def test_the_same_state_again_is_no_transition() -> None:
    states = TryStates(logging.getLogger("test.try"), strict=True)
    for state in (
        "deciding",
        "waiting",
        "deciding",
        "deciding",
        "launching",
        "running",
        "running",
        "failed",
        "failed",
    ):
        states.enter(TryState(state))
    assert [str(s) for s in states.path] == [
        "starting",
        "deciding",
        "waiting",
        "deciding",
        "launching",
        "running",
        "failed",
    ]
