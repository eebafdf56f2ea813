"""``fedsched audit verify FILE`` on hostile files: whatever the file, a clear line naming it within 2 s and
bounded memory, never a traceback: exit 2 for what is not a report, 1 for a report that was altered."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_provider_fedsched.federation.audit import (
    FORMAT,
    MAX_REPORT_BYTES,
    LedgerReading,
    build_report,
    dump_report,
)
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.spec import load_spec
from tests.hostile.harness import check, cli_outcome, run_bounded
from tests.hostile.test_files_and_cli import SPEC

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def report_text() -> str:
    spec = load_spec(SPEC)
    record = PlacementRecord(dag_id="d", run_id="r", task_id="t", try_number=1, started_at=NOW)
    record.request = {"datasets": ["eu-customers"]}
    record.attempts.append(
        Attempt(
            number=1,
            cluster="eu-a",
            namespace="default",
            pod="t-1",
            placement_id=record.placement_id(1),
            started_at=NOW,
        )
    )
    ledgers = {name: LedgerReading(frozenset()) for name in ("eu-a", "cn-a")}
    return dump_report(build_report(spec, [record], ledgers, generated_at=NOW))


def write(path: Path, content: bytes) -> str:
    path.write_bytes(content)
    return str(path)


def sparse(path: Path, size: int) -> str:
    with path.open("wb") as handle:
        handle.truncate(size)
    return str(path)


def fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def report_with(change: Callable[[dict], None]) -> bytes:  # type: ignore[type-arg]
    document = json.loads(report_text())
    change(document)
    return dump_report(document).encode()


NOT_REPORTS: list[tuple[str, Callable[[Path], str], str]] = [
    ("missing", lambda d: str(d / "missing.json"), "No such file"),
    ("a folder", lambda d: str(d), "not a regular file"),
    ("a named pipe", lambda d: fifo(d / "pipe"), "not a regular file"),
    ("a device", lambda d: "/dev/zero", "not a regular file"),
    ("empty", lambda d: write(d / "empty", b""), "not JSON"),
    ("binary", lambda d: write(d / "bin", bytes(range(256)) * 64), "not JSON"),
    ("YAML", lambda d: write(d / "spec.yaml", SPEC.encode()), "not JSON"),
    ("a JSON list", lambda d: write(d / "list.json", b"[1, 2, 3]"), "no header"),
    ("another format", lambda d: write(d / "o.json", b'{"header": {"format": "x"}}'), "no header"),
    ("nested deep", lambda d: write(d / "deep.json", b"[" * 200_000 + b"]" * 200_000), "not JSON"),
    ("NaN", lambda d: write(d / "nan.json", b'{"header": NaN}'), "not JSON"),
    ("over the size limit", lambda d: sparse(d / "big.json", MAX_REPORT_BYTES + 10), "more than the"),
    ("dense", lambda d: write(d / "dense.json", b"[" + b"0," * 2**20 + b"0]"), "far more values"),
    (
        "a newer version",
        lambda d: write(d / "v9.json", report_with(lambda doc: doc["header"].update(version=9))),
        "version 9",
    ),
]


@pytest.mark.parametrize(("case", "make", "named"), NOT_REPORTS, ids=[case for case, _, _ in NOT_REPORTS])
def test_what_is_not_a_report_exits_2_naming_the_file(
    tmp_path: Path, case: str, make: Callable[[Path], str], named: str
) -> None:
    path = make(tmp_path)
    check(*run_bounded(lambda: cli_outcome(["audit", "verify", path])), "exit", 2, named)
    check(*run_bounded(lambda: cli_outcome(["audit", "verify", path])), "exit", 2, f"FILE {path}")


ALTERED: list[tuple[str, Callable[[], bytes], str]] = [
    ("truncated", lambda: report_text().encode()[:-40], "no longer valid JSON"),
    ("entries not a list", lambda: report_with(lambda d: d.update(entries={})), "not a list"),
    ("an entry not an object", lambda: report_with(lambda d: d["entries"].append(7)), "entry 2 is not"),
    (
        "a huge number",
        lambda: report_text().replace('"number": 1', '"number": ' + "9" * 5000).encode(),
        "entry",
    ),
    ("a field added", lambda: report_with(lambda d: d.update(extra=1)), "fields the export did not write"),
    (
        "a verdict cleared",
        lambda: report_text().replace('"verdict": "compliant"', '"verdict": "violation"').encode(),
        "entry 1 (d.t on eu-a) was altered",
    ),
]


@pytest.mark.parametrize(("case", "make", "named"), ALTERED, ids=[case for case, _, _ in ALTERED])
def test_an_altered_report_exits_1_saying_what_does_not_verify(
    tmp_path: Path, case: str, make: Callable[[], bytes], named: str
) -> None:
    data = make()
    assert FORMAT.encode() in data
    path = write(tmp_path / "report.json", data)
    check(*run_bounded(lambda: cli_outcome(["audit", "verify", path])), "exit", 1, named)


def test_an_intact_report_verifies(tmp_path: Path) -> None:
    path = write(tmp_path / "report.json", report_text().encode())
    check(*run_bounded(lambda: cli_outcome(["audit", "verify", path])), "exit", 0, "intact: 1 entries verify")
