"""``fedsched testbed up``: the simulator's federation config on real control planes, in the foreground."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_fedsched.cli._common import (
    UsageError,
    load_sim_config,
    print_state_files,
    until_signalled,
)


def add_parser(subparsers: Any) -> None:
    testbed = subparsers.add_parser(
        "testbed", help="run member clusters on real Kubernetes control planes (kwok)"
    )
    sub = testbed.add_subparsers(dest="testbed_command", required=True)
    up = sub.add_parser(
        "up",
        help="start real etcd, kube-apiserver, scheduler, controller-manager and kwok per cluster; "
        "wait for SIGINT/SIGTERM",
        description="Needs the binaries from `make testbed`. Reads the same YAML as `fedsched sim up` and "
        "writes the same kubeconfig, federation.yaml and airflow.env into --state-dir.",
    )
    up.add_argument("--config", help="simulator YAML (default: the simulator's three built-in clusters)")
    up.add_argument("--state-dir", required=True, help="where kubeconfig, federation.yaml and airflow.env go")
    up.add_argument(
        "--time-scale", type=float, help="multiply pod run and start durations (0.1 = 10x faster)"
    )
    up.set_defaults(handler=cmd_up)


def cmd_up(args: argparse.Namespace) -> int:
    from airflow_provider_fedsched.testbed import KUBERNETES_VERSION, TestbedFederation, TestbedUnavailable
    from airflow_provider_fedsched.testbed.processes import StartupError

    config = load_sim_config(args)
    with until_signalled() as stop:
        fed = TestbedFederation(config, state_dir=args.state_dir, time_scale=args.time_scale)
        try:
            fed.start()
        except (TestbedUnavailable, StartupError) as exc:
            raise UsageError(str(exc)) from None
        try:
            memory = fed.memory_bytes()
            for handle in fed:
                mib = sum(memory[handle.name].values()) / 2**20
                print(
                    f"cluster {handle.name}: {handle.url} (context {handle.name}, conn_id {handle.conn_id}, "
                    f"ready in {handle.cluster.startup_seconds['ready']:.1f}s, {mib:.0f} MiB)"
                )
            print_state_files(fed.state_dir)
            print(
                f"testbed ready: {len(fed.handles)} clusters, kubernetes={KUBERNETES_VERSION}, "
                f"in {fed.startup_seconds:.1f}s",
                flush=True,
            )
            while not stop.wait(0.5):
                pass
        finally:
            fed.stop()
        print("testbed stopped", flush=True)
    return 0
