"""``fedsched sim up`` (run the simulated federation in the foreground), ``sim fault`` and ``sim status``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.cli._common import (
    UsageError,
    load_sim_config,
    print_state_files,
    until_signalled,
)
from airflow_provider_fedsched.federation._errors import SpecError
from airflow_provider_fedsched.federation.documents import parse_yaml, read_text_file


def add_parser(subparsers: Any) -> None:
    from airflow_provider_fedsched.sim.control import FAULT_KINDS

    sim = subparsers.add_parser("sim", help="run or disturb the simulated Kubernetes federation")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)

    up = sim_sub.add_parser("up", help="start the simulated clusters and wait for SIGINT/SIGTERM")
    up.add_argument("--config", help="simulator YAML (default: three built-in clusters)")
    up.add_argument("--state-dir", required=True, help="where kubeconfig, federation.yaml and airflow.env go")
    up.add_argument("--time-scale", type=float, help="multiply every simulated duration (0.1 = 10x faster)")
    up.set_defaults(handler=cmd_up)

    fault = sim_sub.add_parser(
        "fault",
        help="inject a fault into a running simulator",
        description="Kinds:\n" + "\n".join(f"  {k}: {v}" for k, v in FAULT_KINDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fault.add_argument("--state-dir", required=True, help="the --state-dir of 'fedsched sim up'")
    fault.add_argument("cluster")
    fault.add_argument("kind", help=", ".join(FAULT_KINDS))
    fault.add_argument("args", nargs="*", help="KEY=VALUE arguments (e.g. node=east-cpu-cpu-1)")
    fault.set_defaults(handler=cmd_fault)

    status = sim_sub.add_parser("status", help="show a running simulator's clusters, faults, nodes and pods")
    status.add_argument("--state-dir", required=True, help="the --state-dir of 'fedsched sim up'")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=cmd_status)


def cmd_up(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.sim.cluster import SimPortInUse
    from airflow_provider_fedsched.sim.harness import SimFederation, SimStateDirInUse

    config = load_sim_config(args)
    with until_signalled() as stop:
        try:
            fed = SimFederation(config, state_dir=args.state_dir, time_scale=args.time_scale).start()
        except SimStateDirInUse as exc:
            raise UsageError(f"--state-dir {exc}") from None
        except SimPortInUse as exc:
            raise UsageError(str(exc)) from None
        try:
            for handle in fed:
                print(
                    f"cluster {handle.name}: {handle.url} (context {handle.name}, conn_id {handle.conn_id})"
                )
            print_state_files(Path(args.state_dir))
            print(f"sim ready: {len(fed.handles)} clusters, time_scale={fed.config.time_scale}", flush=True)
            while not stop.wait(0.5):
                pass
        finally:
            fed.stop()
        print("sim stopped", flush=True)
    return 0


def _parse_kv(items: list[str], keep_keys: bool = False) -> dict[str, Any]:
    """KEY=VALUE arguments; ``retry-after`` means ``retry_after`` unless ``keep_keys`` (quota resources)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"fault argument {item!r}: expected KEY=VALUE")
        try:
            parsed = parse_yaml(value, f"fault argument {key}") if value else ""
        except SpecError:
            parsed = value
        out[key if keep_keys else key.replace("-", "_")] = parsed
    return out


def _state(state_dir: str) -> tuple[str, dict[str, str | None]]:
    """The control URL of a running simulator and each cluster's token, from its state folder."""
    state = Path(state_dir)
    try:
        kubeconfig = parse_yaml(read_text_file(state / "kubeconfig", "kubeconfig"), "kubeconfig")
        meta = json.loads(read_text_file(state / "sim.json", "simulator state"))  # a FIFO would block
        users = {u["name"]: u["user"].get("token") for u in kubeconfig.get("users") or []}
        tokens = {c["name"]: users.get(c["context"]["user"]) for c in kubeconfig.get("contexts") or []}
        return str(meta["control_url"]), tokens
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:  # SpecError is a ValueError
        raise UsageError(f"--state-dir {state}: no simulator state found ({exc})") from None


def _control(url: str, token: str | None, body: bytes | None = None) -> Any:
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def cmd_status(args: argparse.Namespace) -> int:
    control_url, tokens = _state(args.state_dir)
    statuses = {}
    try:
        for name, token in tokens.items():
            statuses[name] = _control(f"{control_url}/sim/v1/clusters/{name}/status", token)
    except urllib.error.HTTPError as exc:
        raise UsageError(
            f"--state-dir {args.state_dir}: the simulator refused the status query ({exc})"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"sim: not running (state {args.state_dir}; control endpoint {control_url}: {reason})")
        return 1
    if args.json:
        print(json.dumps({"control_url": control_url, "clusters": statuses}, indent=2))
        return 0
    print(f"sim: running, control {control_url}")
    for name, s in statuses.items():
        faults = [
            "DOWN" if not s["serving"] else "",
            f"latency {s['latency_seconds']}s" if s["latency_seconds"] else "",
            f"{s['pending_error_bursts']} injected errors pending" if s["pending_error_bursts"] else "",
            "scheduler paused" if s["scheduler_paused"] else "",
            f"not ready: {', '.join(s['nodes']['not_ready'])}" if s["nodes"]["not_ready"] else "",
        ]
        pods = ", ".join(f"{phase} {count}" for phase, count in s["pods"].items()) or "no pods"
        print(
            f"  {name}: {s['url']}  nodes {s['nodes']['ready']}/{s['nodes']['total']} ready  pods: {pods}"
            f"  jobs {s['jobs']}  requests {s['requests']}"
            + ("  [" + "; ".join(f for f in faults if f) + "]" if any(faults) else "")
        )
    return 0


def cmd_fault(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.sim.control import FAULT_KINDS

    if args.kind not in FAULT_KINDS:
        raise UsageError(f"unknown fault kind {args.kind!r}; known: {', '.join(FAULT_KINDS)}")
    control_url, tokens = _state(args.state_dir)
    if args.cluster not in tokens:
        raise UsageError(f"unknown cluster {args.cluster!r}; known: {', '.join(tokens)}")
    token = tokens[args.cluster]
    fault_args = _parse_kv(args.args, keep_keys=args.kind == "quota")
    body = json.dumps({"kind": args.kind, "args": fault_args}).encode()
    request = urllib.request.Request(
        f"{control_url}/sim/v1/clusters/{args.cluster}/faults",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print(response.read().decode())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode()
        with contextlib.suppress(ValueError):
            detail = json.loads(detail).get("message", detail)
        raise UsageError(f"fault {args.kind} on {args.cluster}: {detail}") from None
    except urllib.error.URLError as exc:
        raise UsageError(f"simulator control endpoint unreachable: {exc.reason}") from None
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
