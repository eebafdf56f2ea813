"""What each user file costs at its limit: wall time and peak memory of reading it, each in a fresh process.

Run: ``.venv/bin/python benchmarks/bench_input_limits.py [--only NAME]``

For every file the provider or ``fedsched replay`` reads, inputs are generated at the limits of
``federation/limits.py`` and ``replay/workload.py``: the largest file that is read whole (accepted, or refused
only by the checks after reading, such as the spec's own validation), and the file that reaches the node,
entry or row limit in the fewest bytes (refused where it passes the limit: the cost of reading up to it).
Each is read by the same function the CLI and the hook use (``load_spec``, ``load_snapshots``,
``load_kubeconfig``, ``load_config``, ``read_pods``/``read_nodes``; a member connection as the hook
resolves it, Airflow's own reading included) in a new interpreter; reported: the
wall time of the read and the process's peak resident memory, and the same for a baseline in the same run
(the smallest valid file of that kind, same process set-up) so that a slower machine shows as a ratio.
Results are in docs/reliability.md ("Limits and bad input").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from airflow_provider_fedsched.federation.limits import (
    CONFIG_LIMITS,
    KUBECONFIG_LIMITS,
    MAX_CLUSTERS,
    SNAPSHOT_LIMITS,
    SPEC_LIMITS,
)
from airflow_provider_fedsched.replay import workload

RUNNER = """
import json, resource, sys, time
from pathlib import Path
kind, path = sys.argv[1], Path(sys.argv[2])
from airflow_provider_fedsched.federation import load_snapshots, load_spec
from airflow_provider_fedsched.replay.workload import read_nodes, read_pods
from airflow_provider_fedsched.sim.config import load_config
from airflow_provider_fedsched.validation.kubeconfig import load_kubeconfig
def member_connection(path):
    # As the hook resolves a member: Airflow reads the connection (and masks its extra), then the provider.
    import os
    os.environ["AIRFLOW_CONN_K8S_X"] = path.read_text()
    _access_from_connection("x", "k8s_x", None)
if kind == "connection":
    from airflow_provider_fedsched.hooks.federation import _access_from_connection
read = {"spec": load_spec, "snapshot": load_snapshots, "kubeconfig": load_kubeconfig, "sim": load_config,
        "pods": read_pods, "nodes": read_nodes, "connection": member_connection}[kind]
started = time.perf_counter()
try:
    read(path)
    outcome = "read"
except ValueError as exc:
    outcome = "refused: " + str(exc)[:90]
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": elapsed, "peak_mib": peak, "outcome": outcome}))
"""


def _fill(
    path: Path, head: str, item: Callable[[int], str], max_bytes: int, tail: str = "", most: int = 10**9
) -> int:
    """``head``, then ``item(0)``, ``item(1)``... while the file stays within ``max_bytes``; how many."""
    size = len(head) + len(tail)
    count = 0
    with path.open("w") as handle:
        handle.write(head)
        while True:
            text = item(count)
            if size + len(text) > max_bytes or count == most:
                break
            handle.write(text)
            size += len(text)
            count += 1
        handle.write(tail)
    return count


def _cluster(index: int) -> str:
    labels = ", ".join(f"label-{k}: value-{index}-{k}" for k in range(12))
    return (
        f"  - {{name: cluster-{index:05d}, conn_id: k8s_{index:05d}, region: region-{index % 50}, "
        f"group: group-{index % 10}, labels: {{{labels}}}, "
        "prices: {cpu_hour: 0.04, memory_gib_hour: 0.005, gpu_hour: 2.0, egress_gb: 0.05}}\n"
    )


def _node(index: int) -> str:
    labels = "".join(f"          label-{k}: value-{k}-{index % 97}\n" for k in range(15))
    return (
        f"      - name: node-{index:07d}\n"
        "        allocatable: {cpu: '64', memory: 256Gi, nvidia.com/gpu: '8', pods: '110'}\n"
        "        requested: {cpu: 12500m, memory: 64Gi, nvidia.com/gpu: '2'}\n"
        f"        labels:\n{labels}"
        "        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n"
        "        ready: true\n"
    )


_YAML_NODES_PER_NODE = 66
"""One node of :func:`_node` is 64 YAML nodes (keys, values, lists, mappings); 2 spare for its cluster."""


def _nodes_per_cluster(index: int) -> str:
    head = f"  - cluster: c{index // 2000:05d}\n    observed_at: 2025-06-01T08:00:00Z\n    nodes:\n"
    return (head if index % 2000 == 0 else "") + _node(index)


def _pod(index: int) -> str:
    sizes = f"{1000 + index % 32000},{2048 + index % 9000},1,500"
    return f"pod-{index:08d},{sizes},T4,BE,Succeeded,{index},{index + 900},{index}\n"


def generate(folder: Path) -> list[tuple[str, str, Path, Path]]:
    """(name, reader, input at the limit, baseline input)."""
    cases: list[tuple[str, str, Path, Path]] = []
    small_spec = folder / "small-spec.yaml"
    small_spec.write_text("clusters:\n" + _cluster(0))
    path = folder / "spec-clusters.yaml"
    count = _fill(path, "clusters:\n", _cluster, SPEC_LIMITS.max_bytes, most=MAX_CLUSTERS)
    cases.append((f"spec: {count:,} clusters with labels and prices", "spec", path, small_spec))
    path = folder / "spec-entries.yaml"
    _fill(path, "clusters:\n", lambda i: f"  - {{name: c{i}}}\n", SPEC_LIMITS.max_bytes)
    cases.append(("spec: 8 MiB of clusters (refused at 10,001)", "spec", path, small_spec))
    path = folder / "spec-nodes.yaml"
    _fill(path, "clusters: [[", lambda i: "0,", SPEC_LIMITS.max_bytes, "]]\n")
    cases.append((f"spec: {SPEC_LIMITS.max_nodes:,} YAML nodes of 2 bytes", "spec", path, small_spec))
    path = folder / "spec-mappings.yaml"
    _fill(path, "clusters: [[", lambda i: "{a: b},", SPEC_LIMITS.max_bytes, "]]\n")
    cases.append((f"spec: {SPEC_LIMITS.max_nodes:,} YAML nodes as small mappings", "spec", path, small_spec))

    small_snapshot = folder / "small-snapshot.yaml"
    small_snapshot.write_text("clusters:\n" + _nodes_per_cluster(0))
    path = folder / "snapshot-nodes.yaml"
    most = SNAPSHOT_LIMITS.max_nodes // _YAML_NODES_PER_NODE
    count = _fill(path, "clusters:\n", _nodes_per_cluster, SNAPSHOT_LIMITS.max_bytes, most=most)
    cases.append((f"snapshot: {count:,} nodes with 15 labels each", "snapshot", path, small_snapshot))
    path = folder / "snapshot-yaml-nodes.yaml"
    _fill(path, "clusters: [[", lambda i: "0,", SNAPSHOT_LIMITS.max_bytes, "]]\n")
    cases.append(
        (f"snapshot: {SNAPSHOT_LIMITS.max_nodes:,} YAML nodes of 2 bytes", "snapshot", path, small_snapshot)
    )
    path = folder / "snapshot-mappings.yaml"
    _fill(path, "clusters: [[", lambda i: "{a: b},", SNAPSHOT_LIMITS.max_bytes, "]]\n")
    cases.append(
        (
            f"snapshot: {SNAPSHOT_LIMITS.max_nodes:,} YAML nodes as small mappings",
            "snapshot",
            path,
            small_snapshot,
        )
    )

    small_kubeconfig = folder / "small-kubeconfig.yaml"
    kubeconfig = (
        "clusters: [{name: a, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: a, context: {cluster: a, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\ncurrent-context: a\n"
    )
    small_kubeconfig.write_text(kubeconfig)
    path = folder / "kubeconfig-nodes.yaml"
    _fill(path, kubeconfig + "x: [", lambda i: "{a: b},", KUBECONFIG_LIMITS.max_bytes, "]\n")
    cases.append(
        (f"kubeconfig: {KUBECONFIG_LIMITS.max_nodes:,} YAML nodes", "kubeconfig", path, small_kubeconfig)
    )

    # A member connection whose extra holds the kubeconfig inline (docs/deploy.md), the certificate grown.
    small_connection = folder / "small-connection.json"
    for target, size in ((small_connection, 0), (folder / "connection-1mb.json", 10**6)):
        inline = kubeconfig.replace(
            "'https://127.0.0.1:1'", f"'https://127.0.0.1:1', certificate: '{'A' * size}'"
        )
        target.write_text(json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": inline}}))
    cases.append(("member connection: inline kube_config of 1 MB", "connection", target, small_connection))
    path = folder / "connection-at-limit.json"
    size = KUBECONFIG_LIMITS.max_bytes - len(kubeconfig) - 4096
    inline = kubeconfig.replace(
        "'https://127.0.0.1:1'", f"'https://127.0.0.1:1', certificate: '{'A' * size}'"
    )
    path.write_text(json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": inline}}))
    cases.append(
        (
            "member connection: inline kube_config at the kubeconfig limit",
            "connection",
            path,
            small_connection,
        )
    )

    small_sim = folder / "small-sim.yaml"
    small_sim.write_text("clusters: [{name: a}]\n")
    path = folder / "sim-nodes.yaml"
    _fill(path, "clusters: [{name: a, labels: {", lambda i: f"l{i}: v,", CONFIG_LIMITS.max_bytes, "}}]\n")
    cases.append((f"simulator configuration: {CONFIG_LIMITS.max_nodes:,} YAML nodes", "sim", path, small_sim))

    header = ",".join([*workload.POD_COLUMNS, "gpu_spec", "qos", "pod_phase"])
    header += ",creation_time,deletion_time,scheduled_time\n"
    small_pods = folder / "small-pods.csv"
    small_pods.write_text(header + _pod(0))
    path = folder / "pods.csv"
    _fill(path, header, _pod, min(workload.MAX_CSV_BYTES, (workload.MAX_POD_ROWS + 10) * len(_pod(10**6))))
    cases.append(
        (f"replay pods: {workload.MAX_POD_ROWS:,} rows (refused at the next)", "pods", path, small_pods)
    )
    small_nodes = folder / "small-nodes.csv"
    small_nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,8,V100\n")
    path = folder / "nodes.csv"
    with path.open("w") as handle:
        handle.write("sn,cpu_milli,memory_mib,gpu,model\n")
        handle.writelines(f"node-{i:07d},32000,131072,8,V100\n" for i in range(workload.MAX_NODE_ROWS))
    cases.append((f"replay nodes: {workload.MAX_NODE_ROWS:,} rows", "nodes", path, small_nodes))
    return cases


def measure(kind: str, path: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, kind, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name contains this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedsched-limits-") as folder:
        print("| Input | Size | Read in | Peak memory | Baseline (smallest file) | Outcome |")
        print("|---|---|---|---|---|---|")
        for name, kind, path, baseline in generate(Path(folder)):
            if args.only and args.only not in name:
                continue
            at_limit, small = measure(kind, path), measure(kind, baseline)
            print(
                f"| {name} | {path.stat().st_size / 2**20:.1f} MiB | {at_limit['seconds']:.2f} s "
                f"| {at_limit['peak_mib']:.0f} MiB "
                f"| {small['seconds'] * 1000:.1f} ms, {small['peak_mib']:.0f} MiB "
                f"| {at_limit['outcome']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
