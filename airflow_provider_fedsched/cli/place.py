"""``fedsched place``: ask the placement cycle where a task would go, from a spec and a snapshot file
(or snapshots read now, with ``--live``): the answer a task gets from the same inputs, nothing held."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_provider_fedsched.cli._common import (
    EXIT_NOT_PLACED,
    EXIT_OK,
    UsageError,
    add_member_options,
    bounded_int,
    check_clusters,
    key_value,
    live_snapshots,
    load_federation,
    load_snapshot_file,
    parse_duration,
    parse_time,
    print_json,
)
from airflow_provider_fedsched.federation import (
    Decision,
    FederationEngine,
    PolicySpec,
    QuantityError,
    ResourceList,
    SpecError,
    TaskRequest,
    Toleration,
    parse_resource_list,
)
from airflow_provider_fedsched.federation.cycle import FixedState

_FUTURE_TOLERANCE = timedelta(hours=1)
"""How far past this machine's clock a saved snapshot's observed_at may be (clock skew between machines)."""


def parse_toleration(text: str) -> Toleration:
    """``key=value:Effect``, ``key:Effect`` (Exists), ``key=value`` / ``key`` (any effect), ``*`` (all)."""
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    fields: dict[str, str] = {"operator": "Exists"}
    if spec != "*":
        key, has_value, value = spec.partition("=")
        fields = {"key": key, "operator": "Equal" if has_value else "Exists", "value": value}
    if effect:
        fields["effect"] = effect
    try:
        return Toleration.from_k8s(fields, field="")
    except SpecError as exc:
        raise UsageError(
            f"--toleration: '{text}' is not a valid toleration (key=value:Effect with Effect in NoSchedule, "
            f"PreferNoSchedule, NoExecute): {exc}"
        ) from None


def _request_resources(args: argparse.Namespace) -> dict[str, Any]:
    quantities: dict[str, Any] = {}
    given_by: dict[str, str] = {}
    """Resource -> the option its quantity came from (the last one given wins, as for the quantity)."""
    for name, option in _RESOURCE_OPTIONS.items():
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            quantities[name], given_by[name] = value, option
    for item in args.resource or []:
        name, value = key_value(item, "--resource")
        quantities[name], given_by[name] = value, "--resource"
    try:
        return parse_resource_list(quantities)
    except QuantityError as exc:
        name = str(exc).split(":")[0]
        raise UsageError(f"{given_by.get(name, '--resource')}: request.resources.{exc}") from None


_RESOURCE_OPTIONS = {
    "cpu": "--cpu",
    "memory": "--memory",
    "nvidia.com/gpu": "--gpu",
    "ephemeral-storage": "--ephemeral-storage",
}
"""The option a resource's quantity comes from, for the error message."""


# The request field a command-line option fills: an error in the field names the option.
_OPTIONS = {
    "resources": "--cpu/--memory/--gpu/--resource",
    "node_selector": "--node-selector",
    "cluster_selector": "--cluster-selector",
    "tolerations": "--toleration",
    "datasets": "--dataset",
    "prefer_region": "--prefer-region",
    "prefer_group": "--prefer-group",
    "clusters": "--cluster",
    "namespace": "--namespace",
    "expected_duration_seconds": "--duration",
}


def build_request(args: argparse.Namespace) -> TaskRequest:
    try:
        return TaskRequest.build(
            resources=_request_resources(args),
            node_selector=dict(key_value(item, "--node-selector") for item in args.node_selector or []),
            cluster_selector=dict(
                key_value(item, "--cluster-selector") for item in args.cluster_selector or []
            ),
            tolerations=[parse_toleration(item) for item in args.toleration or []],
            datasets=list(args.dataset or []),
            prefer_region=args.prefer_region,
            prefer_group=args.prefer_group,
            clusters=list(args.cluster) if args.cluster else None,
            namespace=args.namespace,
            expected_duration_seconds=parse_duration(args.duration),
        )
    except SpecError as exc:
        raise _naming_the_option(exc) from None


def _naming_the_option(exc: SpecError) -> UsageError:
    """A problem with a request field, led by the option that filled it."""
    field = str(exc).removeprefix("request.").split(":")[0].split(".")[0].split("[")[0]
    option = _OPTIONS.get(field)
    return UsageError(f"{option}: {exc}" if option else str(exc))


def _forecast(items: Sequence[str]) -> dict[str, float] | None:
    if not items:
        return None
    forecast = {}
    for item in items:
        cluster, value = key_value(item, "--forecast")
        try:
            idle = float(value)
        except ValueError:
            idle = -1.0
        if not 0 <= idle <= 1:  # NaN too
            raise UsageError(f"--forecast: '{value}' for {cluster} is not a number in 0..1")
        forecast[cluster] = idle
    return forecast


def _weights(items: Sequence[str]) -> dict[str, Any]:
    weights: dict[str, Any] = {}
    for item in items:
        name, value = key_value(item, "--weight")
        weights[name] = value
    return {"weights": weights} if weights else {}


WHAT_IF_PLACEMENT = "what-if"
"""The placement id of a what-if (nothing is held under it)."""


def what_if(
    request: TaskRequest,
    state: FixedState,
    policy: PolicySpec | None = None,
    forecast: Mapping[str, float] | None = None,
) -> Decision:
    """Where the task would go given ``state``: the placement cycle a task runs (cooldown retry, hard
    quotas, the impossible verdict, the tenant's permit), holding nothing."""
    return state.cycle(FederationEngine(state.spec)).place(
        request, WHAT_IF_PLACEMENT, policy=policy, forecast=forecast
    )


def run_place(args: argparse.Namespace) -> int:
    if args.live == (args.snapshots is not None):
        raise UsageError("give either --snapshots SNAP.yaml or --live (read the clusters now)")
    spec = load_federation(args.federation)
    # Read live: each member's hard quota limits per namespace (a request above one is "never").
    quotas: dict[str, dict[str, ResourceList]] = {}
    if args.live:
        snapshots = live_snapshots(spec, args.kubeconfig, args.timeout, quotas)
    else:
        snapshots = load_snapshot_file(args.snapshots)
    request = build_request(args)
    if args.now is not None:
        now = parse_time(args.now)
    elif snapshots and not args.live:
        # Decide "as of" the newest observation so that a saved snapshot file is never stale.
        now = max(snapshot.observed_at for snapshot in snapshots.values())
        if now > datetime.now(UTC) + _FUTURE_TOLERANCE:
            newest = max(snapshots.values(), key=lambda snapshot: snapshot.observed_at)
            raise UsageError(
                f"--snapshots {args.snapshots}: cluster {newest.cluster} was observed_at "
                f"{now.isoformat()}, in the future; every other snapshot would look stale (give --now to "
                "decide as of a chosen time)"
            )
    else:
        now = datetime.now(UTC)
    try:
        policy = spec.policy.merged(_weights(args.weight or []))
    except SpecError as exc:
        raise UsageError(f"--weight: {exc}") from None
    check_clusters(spec, args.cooldown or [], "--cooldown")
    forecast = _forecast(args.forecast or [])
    check_clusters(spec, forecast or {}, "--forecast")
    cooldowns = {name: now + timedelta(seconds=policy.cooldown_seconds) for name in args.cooldown or []}
    try:
        state = FixedState.of(spec, snapshots, now, cooldowns=cooldowns, quotas=quotas)
        decision = what_if(request, state, policy, forecast)
    except SpecError as exc:
        raise _naming_the_option(exc) from None
    if args.json:
        print_json(decision.to_dict())
    else:
        from airflow_provider_fedsched.render import decision_table

        print(decision_table(decision, width=args.width), end="")
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
    output.add_argument(
        "--width", type=bounded_int(40, 1000), default=120, help="table width, 40..1000 (default 120)"
    )
    parser.set_defaults(handler=run_place)
    return parser
