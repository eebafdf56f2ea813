"""``fedsched sim up`` (run the simulated federation in the foreground) and ``fedsched sim fault``."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_fedsched.cli._common import UsageError
from airflow_provider_fedsched.sim.cluster import SimPortInUse
from airflow_provider_fedsched.sim.config import SimConfigError, default_config, load_config
from airflow_provider_fedsched.sim.control import FAULT_KINDS


def add_parser(subparsers: Any) -> None:
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


def cmd_up(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.sim.harness import SimFederation

    try:
        config = load_config(args.config) if args.config else default_config()
    except SimConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.time_scale is not None and not 0 < args.time_scale <= 100:
        raise UsageError(f"--time-scale: must be in (0, 100], got {args.time_scale}")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            fed = SimFederation(config, state_dir=args.state_dir, time_scale=args.time_scale).start()
        except SimPortInUse as exc:
            raise UsageError(str(exc)) from None
        try:
            for handle in fed:
                print(
                    f"cluster {handle.name}: {handle.url} (context {handle.name}, conn_id {handle.conn_id})"
                )
            state = Path(args.state_dir)
            print(
                f"kubeconfig: {state / 'kubeconfig'}  federation: {state / 'federation.yaml'}  "
                f"airflow env: {state / 'airflow.env'}"
            )
            print(f"sim ready: {len(fed.handles)} clusters, time_scale={fed.config.time_scale}", flush=True)
            while not stop.wait(0.5):
                pass
        finally:
            fed.stop()
        print("sim stopped", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _parse_kv(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"fault argument {item!r}: expected KEY=VALUE")
        out[key.replace("-", "_")] = yaml.safe_load(value) if value else ""
    return out


def cmd_fault(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    if args.kind not in FAULT_KINDS:
        raise UsageError(f"unknown fault kind {args.kind!r}; known: {', '.join(FAULT_KINDS)}")
    try:
        kubeconfig = yaml.safe_load((state / "kubeconfig").read_text())
        meta = json.loads((state / "sim.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{state}: no running simulator state found ({exc})") from None
    users = {u["name"]: u["user"].get("token") for u in kubeconfig.get("users") or []}
    contexts = {c["name"]: c["context"] for c in kubeconfig.get("contexts") or []}
    if args.cluster not in contexts:
        raise UsageError(f"unknown cluster {args.cluster!r}; known: {', '.join(contexts)}")
    token = users.get(contexts[args.cluster]["user"])
    body = json.dumps({"kind": args.kind, "args": _parse_kv(args.args)}).encode()
    request = urllib.request.Request(
        f"{meta['control_url']}/sim/v1/clusters/{args.cluster}/faults",
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
