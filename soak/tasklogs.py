"""Figures read from the deployment's task logs (informational: the audit never relies on them).

How long the operator's decisions take in this deployment: from the start of a decision ("Scoring afresh",
or the end of a wait, "Waiting ...") to the next "Federation decision" line of the same try's log.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

STARTS = ("Scoring afresh", "Waiting ")
DECIDED = "Federation decision"


def decision_seconds(logs: Path) -> list[float]:
    out: list[float] = []
    for path in logs.glob("dag_id=*/run_id=*/task_id=*/**/attempt=*.log"):
        started: float | None = None
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                event, at = str(entry["event"]), datetime.fromisoformat(entry["timestamp"]).timestamp()
            except (ValueError, KeyError, TypeError):
                continue
            if event.startswith(STARTS):
                started = at
            elif event.startswith(DECIDED) and started is not None:
                out.append(at - started)
                started = None
    return sorted(out)


def summary(seconds: list[float]) -> str:
    if not seconds:
        return "decisions: none logged"

    def at(q: float) -> float:
        return seconds[min(len(seconds) - 1, int(len(seconds) * q))]

    return (
        f"decisions: {len(seconds)} in the task logs, wall seconds p50 {at(0.5):.1f} p90 {at(0.9):.1f} "
        f"max {seconds[-1]:.1f} (a wait's own sleep included)"
    )
