"""``fedsched testbed up | status | fault | down``: the simulator's federation config on real control
planes, in the foreground (``up``), and what the other verbs do to it through its state dir."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from airflow_provider_fedsched.cli._common import (
    UsageError,
    bounded_float,
    key_value,
    load_sim_config,
    print_state_files,
    until_signalled,
)

STOP_TIMEOUT = 120.0
"""``down``: seconds ``up`` has to stop its members (each process gets 10 s before SIGKILL)."""


def add_parser(subparsers: Any) -> None:
    from airflow_provider_fedsched.testbed.control import TESTBED_FAULTS

    testbed = subparsers.add_parser(
        "testbed", help="run member clusters on real Kubernetes control planes (kwok)"
    )
    sub = testbed.add_subparsers(dest="testbed_command", required=True)
    up = sub.add_parser(
        "up",
        help="start real etcd, kube-apiserver, scheduler, controller-manager and kwok per cluster; "
        "wait for SIGINT/SIGTERM or `fedsched testbed down`",
        description="Needs the binaries from `make testbed`. Reads the same YAML as `fedsched sim up` and "
        "writes the same kubeconfig, federation.yaml and airflow.env into --state-dir, plus testbed.json "
        "(processes, ports) and control.sock (for `fedsched testbed fault`). Writes nothing elsewhere.",
    )
    up.add_argument("--config", help="simulator YAML (default: the simulator's three built-in clusters)")
    up.add_argument("--state-dir", required=True, help="where kubeconfig, federation.yaml and airflow.env go")
    up.add_argument(
        "--time-scale", type=float, help="multiply pod run and start durations (0.1 = 10x faster)"
    )
    up.set_defaults(handler=cmd_up)

    status = sub.add_parser(
        "status",
        help="members, Kubernetes versions, API server URLs, and every process with whether it runs",
        description="Exit 0 when `fedsched testbed up` serves the state dir, 1 when it does not.",
    )
    status.add_argument("--state-dir", required=True, help="the --state-dir of 'fedsched testbed up'")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=cmd_status)

    fault = sub.add_parser(
        "fault",
        help="inject a real fault into a running test bed",
        description="Kinds:\n" + "\n".join(f"  {k}: {v.help}" for k, v in TESTBED_FAULTS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fault.add_argument("--state-dir", required=True, help="the --state-dir of 'fedsched testbed up'")
    fault.add_argument(
        "--timeout",
        type=bounded_float(0, 600, exclusive_minimum=True),
        default=300.0,
        help="seconds to wait for the fault to be in force (default 300)",
    )
    fault.add_argument("member")
    fault.add_argument("kind", help=", ".join(TESTBED_FAULTS))
    fault.add_argument("args", nargs="*", help="KEY=VALUE arguments (e.g. node=east-cpu-cpu-1)")
    fault.set_defaults(handler=cmd_fault)

    down = sub.add_parser(
        "down",
        help="stop every process of a running test bed and check that its ports are free",
        description="Stops `fedsched testbed up` (SIGTERM: it stops its members), then checks that every "
        "process it recorded has ended and every port it recorded is free. Exit 0 when they are.",
    )
    down.add_argument("--state-dir", required=True, help="the --state-dir of 'fedsched testbed up'")
    down.add_argument(
        "--timeout",
        type=bounded_float(0, 600, exclusive_minimum=True),
        default=STOP_TIMEOUT,
        help=f"seconds the test bed has to stop (default {STOP_TIMEOUT:g})",
    )
    down.set_defaults(handler=cmd_down)


def cmd_up(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.testbed import KUBERNETES_VERSION, TestbedFederation, TestbedUnavailable
    from airflow_provider_fedsched.testbed.control import ControlServer
    from airflow_provider_fedsched.testbed.federation import StateDirInUse
    from airflow_provider_fedsched.testbed.processes import StartupError

    config = load_sim_config(args)
    with until_signalled() as stop:
        fed = TestbedFederation(config, state_dir=args.state_dir, time_scale=args.time_scale)
        try:
            fed.start()
        except StateDirInUse as exc:
            raise UsageError(
                f"--state-dir: {exc}; stop it with `fedsched testbed down --state-dir {args.state_dir}`"
            ) from None
        except (TestbedUnavailable, StartupError) as exc:
            raise UsageError(str(exc)) from None
        control: ControlServer | None = None
        try:
            control = ControlServer(fed).start()
            memory = fed.memory_bytes()
            for handle in fed:
                mib = sum(memory[handle.name].values()) / 2**20
                print(
                    f"cluster {handle.name}: {handle.url} (context {handle.name}, conn_id {handle.conn_id}, "
                    f"ready in {handle.cluster.startup_seconds['ready']:.1f}s, {mib:.0f} MiB)"
                )
            print_state_files(fed.state_dir)
            print(f"control: {control.path} (fedsched testbed status | fault | down --state-dir ...)")
            print(
                f"testbed ready: {len(fed.handles)} clusters, kubernetes={KUBERNETES_VERSION}, "
                f"in {fed.startup_seconds:.1f}s",
                flush=True,
            )
            while not stop.wait(0.5):
                pass
        finally:
            if control is not None:
                control.stop()
            fed.stop()
        print("testbed stopped", flush=True)
    return 0


def _state(state_dir: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``testbed.json`` and the process serving the state dir (``None`` when it has stopped); a state dir
    with neither was never a test bed's."""
    from airflow_provider_fedsched.testbed.federation import owner, read_state

    path = Path(state_dir)
    state, holder = read_state(path), owner(path)
    if state is None and holder is None:
        raise UsageError(f"--state-dir {state_dir}: no test bed state found (no testbed.json)")
    return state, holder


def _processes(state: dict[str, Any]) -> list[tuple[str, str, int, float]]:
    """(member, process, pid, start time) of every process the state records."""
    return [
        (member, name, int(proc["pid"]), float(proc["create_time"]))
        for member, cluster in state["clusters"].items()
        for name, proc in (cluster.get("processes") or {}).items()
    ]


def cmd_status(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.testbed.processes import process_state

    state, holder = _state(args.state_dir)
    serving = holder is not None and state is not None
    clusters: dict[str, Any] = {}
    for member, cluster in (state or {}).get("clusters", {}).items():
        clusters[member] = {
            "url": cluster["url"],
            "kubernetes": cluster.get("kubernetes") or (state or {}).get("kubernetes"),
            "conn_id": cluster.get("conn_id"),
            "ports": cluster.get("ports") or {},
            "processes": {
                name: {
                    "pid": proc["pid"],
                    "state": process_state(int(proc["pid"]), float(proc["create_time"])),
                }
                for name, proc in (cluster.get("processes") or {}).items()
            },
        }
    control = Path(args.state_dir) / "control.sock"
    document = {
        "state_dir": args.state_dir,
        "serving": serving,
        "pid": holder["pid"] if holder else None,
        "control": str(control) if serving and control.exists() else None,
        "clusters": clusters,
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return 0 if serving else 1
    if holder is None:
        print(f"testbed: not running (state {args.state_dir})")
    elif state is None:
        print(f"testbed: starting (pid {holder['pid']}, state {args.state_dir})")
    else:
        print(
            f"testbed: serving (pid {holder['pid']}, state {args.state_dir}, control {document['control']})"
        )
    for member, cluster in clusters.items():
        print(
            f"  {member}: {cluster['url']}  kubernetes {cluster['kubernetes']}  conn_id {cluster['conn_id']}"
        )
        for name, proc in cluster["processes"].items():
            port = cluster["ports"].get(name)
            print(
                f"    {name:<24} pid {proc['pid']:<8} {proc['state']:<8}" + (f" port {port}" if port else "")
            )
    return 0 if serving else 1


def cmd_fault(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.testbed.control import ControlUnavailable, FaultRefused, ask, check_fault

    fault_args = dict(key_value(item, f"fault argument {item!r}") for item in args.args)
    state, holder = _state(args.state_dir)
    members = list((state or {}).get("clusters", {}))
    try:
        check_fault(members, args.member, args.kind, fault_args)
    except FaultRefused as exc:
        raise UsageError(str(exc)) from None
    if holder is None or state is None:
        raise UsageError(f"--state-dir {args.state_dir}: the test bed is not running")
    try:
        answer = ask(Path(args.state_dir), args.member, args.kind, fault_args, args.timeout)
    except ControlUnavailable as exc:
        raise UsageError(f"--state-dir {args.state_dir}: {exc}") from None
    except OSError as exc:  # a timeout included
        print(f"fedsched testbed: fault {args.kind} on {args.member}: no answer ({exc})", file=sys.stderr)
        return 1
    if answer.get("ok"):
        print(answer.get("message", ""))
        return 0
    if answer.get("bad_input"):
        raise UsageError(str(answer.get("error")))
    print(f"fedsched testbed: {answer.get('error')}", file=sys.stderr)
    return 1


def _wait_ended(pid: int, create_time: float, timeout: float) -> bool:
    from airflow_provider_fedsched.testbed.processes import process_state

    deadline = time.monotonic() + timeout
    while process_state(pid, create_time) != "dead":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def cmd_down(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.testbed.processes import port_free, process_state

    state, holder = _state(args.state_dir)
    if holder is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(holder["pid"]), signal.SIGTERM)
        if not _wait_ended(int(holder["pid"]), float(holder["create_time"]), args.timeout):
            print(
                f"fedsched testbed: the test bed (pid {holder['pid']}) did not stop "
                f"within {args.timeout:g} s",
                file=sys.stderr,
            )
            return 1
    processes = _processes(state) if state else []
    # `up` stops its members, and they end with it if it is killed; whatever still runs was left behind.
    leftovers = [p for p in processes if process_state(p[2], p[3]) != "dead"]
    for member, name, pid, _ in leftovers:
        print(f"{member}: {name} (pid {pid}) was left running: killed")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    running = [p for p in leftovers if not _wait_ended(p[2], p[3], 10)]
    ports = sorted(
        {
            port
            for cluster in (state or {}).get("clusters", {}).values()
            for port in (cluster.get("ports") or {}).values()
        }
    )
    deadline = time.monotonic() + 10
    busy = [port for port in ports if not port_free(port)]
    while busy and time.monotonic() < deadline:
        time.sleep(0.2)
        busy = [port for port in busy if not port_free(port)]
    (Path(args.state_dir) / "control.sock").unlink(missing_ok=True)
    if running or busy:
        print(
            "fedsched testbed: still running: "
            + (", ".join(f"{m}/{n} pid {pid}" for m, n, pid, _ in running) or "nothing")
            + "; ports in use: "
            + (", ".join(map(str, busy)) or "none"),
            file=sys.stderr,
        )
        return 1
    members = len((state or {}).get("clusters", {}))
    what = "stopped" if holder is not None else "was not running"
    print(
        f"testbed {what}: {_count(len(processes), 'process', 'processes')} of "
        f"{_count(members, 'member', 'members')} ended, {_count(len(ports), 'port', 'ports')} free"
    )
    return 0


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
