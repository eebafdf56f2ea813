"""Running one bad input: within 2 s, within bounded memory, its error naming the culprit, no traceback."""

from __future__ import annotations

import contextlib
import io
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TIME_LIMIT = 2.0
"""Seconds one bad input may cost (the issue's acceptance)."""
MEMORY_LIMIT = 256 * 2**20
"""Bytes by which one bad input may raise the process's peak resident memory (``ru_maxrss``): a bomb that
expanded, a quantity computed to a billion digits or a 50 MB file read whole would pass it."""


@dataclass(frozen=True)
class Outcome:
    """What a surface did with a bad input: its exit code, exception or HTTP status, and its messages."""

    kind: str
    """``exit`` (the CLI), ``raised`` (an exception type's name) or ``http`` (a status code)."""
    value: Any
    message: str


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def run_bounded(action: Callable[[], Outcome]) -> tuple[Outcome, float, int]:
    """``action()`` with its wall time and how much it raised the process's peak resident memory."""
    before = _peak_rss()
    started = time.perf_counter()
    outcome = action()
    elapsed = time.perf_counter() - started
    return outcome, elapsed, _peak_rss() - before


def raised(call: Callable[[], Any], *types: type[BaseException]) -> Outcome:
    """The exception ``call`` raised (one of ``types``), or an outcome saying it did not raise."""
    try:
        call()
    except types as exc:
        return Outcome("raised", type(exc).__name__, str(exc))
    return Outcome("raised", None, "did not raise")


def cli_outcome(argv: list[str]) -> Outcome:
    """``fedsched ARGV`` in this process, argparse usage errors included."""
    from airflow_provider_fedsched import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: Any = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    return Outcome("exit", code, err.getvalue() + out.getvalue())


def check(outcome: Outcome, elapsed: float, peak: int, kind: str, expected: Any, culprit: str) -> None:
    """The acceptance of every case of the hostile-input suites."""
    assert (outcome.kind, outcome.value) == (kind, expected), outcome.message
    assert culprit in outcome.message, f"{culprit!r} not named in: {outcome.message}"
    assert "Traceback" not in outcome.message, outcome.message
    assert elapsed < TIME_LIMIT, f"took {elapsed:.2f}s"
    assert peak < MEMORY_LIMIT, f"raised the peak memory by {peak / 2**20:.0f} MiB"
