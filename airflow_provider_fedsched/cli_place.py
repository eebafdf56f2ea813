"""``fedsched place``: ask the federation engine where a task would go, from a spec and a snapshot file.

The loading helpers (:func:`load_federation`, :func:`load_snapshot_file`, :func:`build_request`) turn every
problem into :class:`cli.UsageError` naming the option or field, so later commands (``--live``,
``fedsched snapshot``) can reuse them.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.cli import EXIT_NOT_PLACED, EXIT_OK, UsageError
from airflow_provider_fedsched.federation import (
    ClusterSnapshot,
    FederationEngine,
    FederationSpec,
    QuantityError,
    SpecError,
    TaskRequest,
    Toleration,
    load_snapshots,
    load_spec,
    parse_resource_list,
)

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


def _key_value(text: str, option: str, separator: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(separator)
    if not found or not key.strip():
        raise UsageError(f"{option}: '{text}' is not of the form key{separator}value")
    return key.strip(), value.strip()


def parse_toleration(text: str) -> Toleration:
    """``key=value:Effect``, ``key:Effect`` (Exists), ``key=value`` / ``key`` (any effect), ``*`` (all)."""
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    effect_value = effect or None
    try:
        if spec == "*":
            return Toleration(operator="Exists", effect=effect_value)
        key, has_value, value = spec.partition("=")
        return Toleration(
            key=key,
            operator="Equal" if has_value else "Exists",
            value=value,
            effect=effect_value,
        )
    except ValueError as exc:
        detail = str(exc).splitlines()
        message = detail[-1].strip() if detail else str(exc)
        raise UsageError(
            f"--toleration: '{text}' is not a valid toleration (key=value:Effect with Effect in NoSchedule, "
            f"PreferNoSchedule, NoExecute): {message}"
        ) from None


def load_federation(path: str) -> FederationSpec:
    try:
        return load_spec(Path(path))
    except SpecError as exc:
        raise UsageError(f"--federation {path}: {exc}") from None


def load_snapshot_file(path: str) -> dict[str, ClusterSnapshot]:
    try:
        return load_snapshots(Path(path))
    except SpecError as exc:
        raise UsageError(f"--snapshots {path}: {exc}") from None


def _request_resources(args: argparse.Namespace) -> dict[str, Any]:
    quantities: dict[str, Any] = {}
    for option, name in (("cpu", "cpu"), ("memory", "memory"), ("gpu", "nvidia.com/gpu")):
        value = getattr(args, option)
        if value is not None:
            quantities[name] = value
    if args.ephemeral_storage is not None:
        quantities["ephemeral-storage"] = args.ephemeral_storage
    for item in args.resource or []:
        name, value = _key_value(item, "--resource")
        quantities[name] = value
    try:
        return parse_resource_list(quantities)
    except QuantityError as exc:
        raise UsageError(f"request.resources.{exc}") from None


def build_request(args: argparse.Namespace) -> TaskRequest:
    try:
        return TaskRequest(
            resources=_request_resources(args),
            node_selector=dict(_key_value(item, "--node-selector") for item in args.node_selector or []),
            cluster_selector=dict(
                _key_value(item, "--cluster-selector") for item in args.cluster_selector or []
            ),
            tolerations=[parse_toleration(item) for item in args.toleration or []],
            datasets=list(args.dataset or []),
            prefer_region=args.prefer_region,
            prefer_group=args.prefer_group,
            clusters=list(args.cluster) if args.cluster else None,
            namespace=args.namespace,
            expected_duration_seconds=parse_duration(args.duration),
        )
    except ValueError as exc:
        raise UsageError(f"request: {exc}") from None


def _forecast(items: Sequence[str]) -> dict[str, float] | None:
    if not items:
        return None
    forecast = {}
    for item in items:
        cluster, value = _key_value(item, "--forecast")
        try:
            forecast[cluster] = float(value)
        except ValueError:
            raise UsageError(f"--forecast: '{value}' for {cluster} is not a number in 0..1") from None
    return forecast


def _weights(items: Sequence[str]) -> dict[str, Any]:
    weights: dict[str, Any] = {}
    for item in items:
        name, value = _key_value(item, "--weight")
        weights[name] = value
    return {"weights": weights} if weights else {}


def _check_clusters(names: Sequence[str], known: Mapping[str, object], option: str) -> None:
    for name in names:
        if name not in known:
            raise UsageError(f"{option}: unknown cluster '{name}' (known: {', '.join(sorted(known))})")


def run_place(args: argparse.Namespace) -> int:
    if args.live == (args.snapshots is not None):
        raise UsageError("give either --snapshots SNAP.yaml or --live (read the clusters now)")
    spec = load_federation(args.federation)
    if args.live:
        from airflow_provider_fedsched.cli_snapshot import live_snapshots

        snapshots = live_snapshots(args.federation, args.kubeconfig, args.timeout)
    else:
        snapshots = load_snapshot_file(args.snapshots)
    request = build_request(args)
    clusters = {cluster.name: cluster for cluster in spec.clusters}
    if args.now is not None:
        now = parse_time(args.now)
    elif snapshots and not args.live:
        # Decide "as of" the newest observation so that a saved snapshot file is never stale.
        now = max(snapshot.observed_at for snapshot in snapshots.values())
    else:
        now = datetime.now(UTC)
    try:
        policy = spec.policy.merged(_weights(args.weight or []))
    except SpecError as exc:
        raise UsageError(f"--weight: {exc}") from None
    _check_clusters(args.cooldown or [], clusters, "--cooldown")
    cooldowns = {name: now + timedelta(seconds=policy.cooldown_seconds) for name in args.cooldown or []}
    try:
        decision = FederationEngine(spec).decide(
            request,
            snapshots,
            now=now,
            cooldowns=cooldowns,
            forecast=_forecast(args.forecast or []),
            policy=policy,
        )
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(decision.to_dict(), indent=2))
    else:
        print(decision.render_table(width=args.width), end="")
    return EXIT_OK if decision.placed else EXIT_NOT_PLACED


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "place",
        help="what-if: where would the federation place this task?",
        description="Decide where a task would run, from a federation spec and a snapshot file. "
        "Exit 0 when placed, 3 when the answer is wait or impossible, 2 on bad input.",
    )
    parser.add_argument("--federation", required=True, metavar="FED.yaml", help="federation spec file")
    parser.add_argument("--snapshots", metavar="SNAP.yaml", help="cluster snapshot file")
    parser.add_argument(
        "--live", action="store_true", help="score against snapshots read from the clusters now"
    )
    from airflow_provider_fedsched.cli_snapshot import add_member_options

    add_member_options(parser)
    resources = parser.add_argument_group("resources (Kubernetes quantities)")
    resources.add_argument("--cpu", help="cpu request, e.g. 4 or 500m")
    resources.add_argument("--memory", help="memory request, e.g. 8Gi")
    resources.add_argument("--gpu", help="nvidia.com/gpu request")
    resources.add_argument("--ephemeral-storage", help="ephemeral-storage request")
    resources.add_argument("--resource", action="append", metavar="NAME=QTY", help="any other resource")
    task = parser.add_argument_group("task")
    task.add_argument("--dataset", action="append", metavar="NAME", help="a dataset the task reads")
    task.add_argument("--node-selector", action="append", metavar="K=V", help="node label the pod requires")
    task.add_argument("--cluster-selector", action="append", metavar="K=V", help="cluster label required")
    task.add_argument(
        "--toleration", action="append", metavar="KEY=VALUE:EFFECT", help="toleration (key:Effect = Exists)"
    )
    task.add_argument("--prefer-region", metavar="R")
    task.add_argument("--prefer-group", metavar="G")
    task.add_argument("--cluster", action="append", metavar="NAME", help="restrict to these clusters")
    task.add_argument("--namespace", default="default")
    task.add_argument("--duration", default="1h", help="expected run time (3600, 90m, 1h30m; default 1h)")
    state = parser.add_argument_group("federation state")
    state.add_argument("--cooldown", action="append", metavar="CLUSTER", help="treat CLUSTER as cooling down")
    state.add_argument("--forecast", action="append", metavar="CLUSTER=IDLE", help="predicted idle fraction")
    state.add_argument("--weight", action="append", metavar="PLUGIN=W", help="override a policy weight")
    state.add_argument(
        "--now", help="decision time (ISO 8601); default: the newest observed_at in --snapshots"
    )
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print the decision as JSON")
    output.add_argument("--width", type=int, default=120, help="table width (default 120)")
    parser.set_defaults(handler=run_place)
    return parser
