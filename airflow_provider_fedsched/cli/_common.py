"""What every ``fedsched`` verb shares: the exit codes, :class:`UsageError`, option parsers, the options
that reach member clusters, and loaders that turn every problem into a :class:`UsageError` naming the
option or field at fault.

Heavy imports (Airflow, the Kubernetes clients) happen inside the functions that need them, so that a verb
pays only for what it uses.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
    from airflow_provider_fedsched.federation.spec import FederationSpec

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_NOT_PLACED",
    "EXIT_OK",
    "UsageError",
    "add_member_options",
    "add_verb",
    "check_clusters",
    "key_value",
    "live_snapshots",
    "load_federation",
    "load_snapshot_file",
    "parse_duration",
    "parse_time",
]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_NOT_PLACED = 3


class UsageError(Exception):
    """Bad input from the command line or a file it names; printed without a traceback, exit 2."""


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str, option: str = "--duration") -> float:
    """``"1h"``, ``"90m"``, ``"1h30m"``, ``"45s"``, ``"2d"`` or plain seconds (``"3600"``) -> seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise UsageError(
                f"{option}: '{text}' is not a duration (examples: 3600, 90m, 1h30m, 2d)"
            ) from None
        seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    if not seconds >= 0 or seconds == float("inf"):
        raise UsageError(f"{option}: '{text}' must be a finite, non-negative duration")
    return seconds


def parse_time(text: str, option: str = "--now") -> datetime:
    """An ISO 8601 timestamp; a naive one is taken as UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option}: '{text}' is not an ISO 8601 timestamp (e.g. 2025-06-01T08:00:00Z)"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def key_value(text: str, option: str, separator: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(separator)
    if not found or not key.strip():
        raise UsageError(f"{option}: '{text}' is not of the form key{separator}value")
    return key.strip(), value.strip()


def load_federation(path: str) -> FederationSpec:
    from airflow_provider_fedsched.federation.spec import SpecError, load_spec

    try:
        return load_spec(Path(path))
    except SpecError as exc:
        raise UsageError(f"--federation {path}: {exc}") from None


def load_snapshot_file(path: str) -> dict[str, ClusterSnapshot]:
    from airflow_provider_fedsched.federation.snapshot import load_snapshots
    from airflow_provider_fedsched.federation.spec import SpecError

    try:
        return load_snapshots(Path(path))
    except SpecError as exc:
        raise UsageError(f"--snapshots {path}: {exc}") from None


def check_clusters(spec: FederationSpec, names: Iterable[str], option: str) -> None:
    """Every name a command-line option gives is a member cluster (the spec's one check of names)."""
    from airflow_provider_fedsched.federation.spec import SpecError

    try:
        spec.check_clusters(names, option, indexed=False)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def add_verb(subparsers: Any, name: str, summary: str, doc: str | None) -> argparse.ArgumentParser:
    """The verb's parser: ``summary`` in ``fedsched --help``, the first line of its module's ``doc`` in
    ``fedsched <verb> --help``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=doc.splitlines()[0] if doc else None
    )
    return parser


def add_member_options(parser: argparse.ArgumentParser) -> None:
    """How a verb reaches member clusters: ``fedsched snapshot``, ``place --live`` and ``plan``."""
    parser.add_argument(
        "--kubeconfig",
        help="outside Airflow: resolve each cluster to the context of this kubeconfig named after it",
    )
    parser.add_argument(
        "--timeout", type=float, default=2.0, help="seconds each cluster has to answer (default 2)"
    )


def live_snapshots(
    spec: FederationSpec, kubeconfig: str | None, timeout: float
) -> dict[str, ClusterSnapshot]:
    """Every member's snapshot, read now; every problem becomes a :class:`UsageError` or a reason.

    With a kubeconfig the clusters are read directly (no Airflow import: about a second for a few local
    clusters); without one, members resolve through Airflow connections, which the hook reads.
    """
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
    if timeout <= 0:
        raise UsageError(f"--timeout: must be positive (got {timeout:g})")
    if kubeconfig is not None:
        return _snapshots_from_kubeconfig(spec, kubeconfig, timeout)
    from airflow_provider_fedsched.hooks.federation import FederationHook
    from airflow_provider_fedsched.state import FederationState, MemoryStateBackend

    hook = FederationHook(spec, snapshot_timeout=timeout, state=FederationState(MemoryStateBackend()))
    return hook.collect()


def _snapshots_from_kubeconfig(
    spec: FederationSpec, kubeconfig: str, timeout: float
) -> dict[str, ClusterSnapshot]:
    """Each member through the kubeconfig context named after it, concurrently, each within ``timeout``."""
    from airflow_provider_fedsched.federation.snapshot import ClusterSnapshot
    from airflow_provider_fedsched.kube.access import (
        ClusterAccess,
        ClusterAccessError,
        access_from_kubeconfig_file,
    )
    from airflow_provider_fedsched.kube.clients import run_in_background
    from airflow_provider_fedsched.kube.snapshots import collect_snapshots

    accesses: list[ClusterAccess] = []
    snapshots: dict[str, ClusterSnapshot] = {}
    for member in spec.clusters:
        try:
            accesses.append(
                access_from_kubeconfig_file(member.name, member.name, kubeconfig, member.namespace)
            )
        except ClusterAccessError as exc:
            snapshots[member.name] = ClusterSnapshot(
                cluster=member.name, observed_at=datetime.now(UTC), reachable=False, reason=exc.problem
            )
    snapshots.update(run_in_background(collect_snapshots(accesses, timeout)))
    return snapshots
