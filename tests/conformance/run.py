"""``make conformance``: run tests/conformance and end with one summary line.

``conformance: passed=N failed=M clusters=K kubernetes=vX.Y.Z`` -- K counts the member clusters the suite
started, the version is what their API servers answered on /version.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest


class Tally:
    def __init__(self) -> None:
        self.passed = self.failed = 0

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.failed:
            self.failed += 1
            # At once, not only in the final summary: a long suite shows why while it still runs.
            print(f"\nFAILED {report.nodeid} ({report.when}):\n{report.longreprtext[-1500:]}", flush=True)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.failed += 1


def main(argv: list[str]) -> int:
    tally = Tally()
    code = pytest.main(
        ["tests/conformance", "-m", "conformance", "-p", "no:cacheprovider", *argv], plugins=[tally]
    )
    from tests.conformance.conftest import STARTED

    versions = sorted({version for _, version in STARTED}) or ["none"]
    print(
        f"conformance: passed={tally.passed} failed={tally.failed} clusters={len(STARTED)} "
        f"kubernetes={','.join(versions)}",
        flush=True,
    )
    if tally.failed or not tally.passed:
        return int(code) or 1
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
