"""Hostile input, table-driven: federation spec and snapshot files, and the ``fedsched`` command line.

Every case runs through the real entry point (``load_spec``, ``load_snapshots``, ``fedsched ...``) and
asserts the exit code or exception, that the message names the culprit, no traceback, under 2 s and
bounded memory (``harness.check``).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from airflow_provider_fedsched.federation import SpecError, load_snapshots, load_spec
from tests.hostile.harness import check, cli_outcome, raised, run_bounded

SPEC = textwrap.dedent(
    """\
    name: hostile
    clusters:
      - {name: eu-a, conn_id: k8s_eu_a, region: eu-west-1}
      - {name: cn-a, conn_id: k8s_cn_a, region: cn-east-1}
    datasets:
      - name: eu-customers
        cluster: eu-a
        size_gb: 10
        allowed_regions: [eu-west-1]
    """
)
SNAPSHOTS = textwrap.dedent(
    """\
    clusters:
      - cluster: eu-a
        observed_at: 2025-06-01T08:00:00Z
        nodes: [{name: n1, allocatable: {cpu: "8", memory: 32Gi}}]
      - cluster: cn-a
        observed_at: 2025-06-01T08:00:00Z
        nodes: [{name: n1, allocatable: {cpu: "8", memory: 32Gi}}]
    """
)
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join(['*' + chr(97 + level)] * 10)}]\n"
    for level in range(8)
)


def _spec(extra_cluster: str = "", dataset: str = "", policy: str = "") -> str:
    text = SPEC.replace("    allowed_regions: [eu-west-1]\n", "    allowed_regions: [eu-west-1]\n" + dataset)
    if extra_cluster:
        text = text.replace("datasets:", f"  - {extra_cluster}\ndatasets:")
    return text + (f"policy:\n{policy}" if policy else "")


# (id, spec text, the culprit the message must name) -> load_spec raises SpecError
SPEC_CASES: list[tuple[str, str, str]] = [
    (
        "duplicate allowed_regions",
        SPEC + "    allowed_regions: [cn-east-1]\n",
        "allowed_regions: duplicate key",
    ),
    ("duplicate datasets key", SPEC + "datasets: []\n", "datasets: duplicate key"),
    (
        "duplicate cluster field",
        SPEC.replace("region: cn-east-1}", "region: cn-east-1, region: eu-west-1}"),
        "clusters[1].region: duplicate key",
    ),
    ("alias bomb", ALIAS_BOMB, "YAML nodes"),
    ("recursive alias", "clusters: &c [*c]\n", "clusters"),
    ("deep nesting", "clusters: " + "[" * 200 + "]" * 200 + "\n", "nested deeper"),
    ("cooldown 1e300", _spec(policy="  cooldown_seconds: 1e300\n"), "policy.cooldown_seconds"),
    ("cooldown nan", _spec(policy="  cooldown_seconds: .nan\n"), "policy.cooldown_seconds"),
    ("ttl inf", _spec(policy="  snapshot_ttl_seconds: .inf\n"), "policy.snapshot_ttl_seconds"),
    ("weight 1e308", _spec(policy="  weights: {cost: 1e308}\n"), "policy.weights.cost"),
    ("negative weight", _spec(policy="  weights: {cost: -1}\n"), "policy.weights.cost"),
    (
        "price 1e300",
        SPEC.replace("region: eu-west-1}", "region: eu-west-1, prices: {cpu_hour: 1e300}}"),
        "clusters[0].prices.cpu_hour",
    ),
    ("size_gb inf", SPEC.replace("size_gb: 10", "size_gb: .inf"), "datasets[0].size_gb"),
    (
        "empty allowed_regions",
        SPEC.replace("allowed_regions: [eu-west-1]", "allowed_regions:"),
        "datasets[0].allowed_regions: empty",
    ),
    ("unknown region", SPEC.replace("[eu-west-1]", "[eu-wset-1]"), "eu-wset-1"),
    (
        "dashboard format bomb",
        SPEC.replace(
            "region: eu-west-1}", 'region: eu-west-1, dashboard_url: "https://d/{pod:>99999999999}"}'
        ),
        "clusters[0].dashboard_url",
    ),
    (
        "dashboard javascript",
        SPEC.replace("region: eu-west-1}", 'region: eu-west-1, dashboard_url: "javascript:alert(1)"}'),
        "clusters[0].dashboard_url",
    ),
    (
        "dashboard conversion",
        SPEC.replace("region: eu-west-1}", 'region: eu-west-1, dashboard_url: "https://d/{pod!r}"}'),
        "clusters[0].dashboard_url",
    ),
    (
        "dashboard unknown placeholder",
        SPEC.replace("region: eu-west-1}", 'region: eu-west-1, dashboard_url: "https://d/{pod.__class__}"}'),
        "clusters[0].dashboard_url",
    ),
    (
        "bad namespace",
        SPEC.replace("region: eu-west-1}", "region: eu-west-1, namespace: ../x}"),
        "clusters[0].namespace",
    ),
    (
        "taint effect",
        SPEC.replace("region: eu-west-1}", "region: eu-west-1, taints: [{key: a, effect: Never}]}"),
        "clusters[0].taints[0].effect",
    ),
    ("spec is a list", "- clusters\n", "must be a mapping"),
    ("malformed YAML", "clusters: [\n", "malformed YAML"),
    ("bad timestamp scalar", SPEC + "regions: [2025-13-45]\n", "regions[0]"),
    ("huge integer scalar", _spec(policy=f"  cooldown_seconds: {'9' * 5000}\n"), "policy.cooldown_seconds"),
    ("no clusters", "clusters: []\n", "clusters"),
]


@pytest.mark.parametrize(
    ("text", "culprit"), [case[1:] for case in SPEC_CASES], ids=[c[0] for c in SPEC_CASES]
)
def test_bad_spec_text_is_a_spec_error_naming_the_field(text: str, culprit: str) -> None:
    check(*run_bounded(lambda: raised(lambda: load_spec(text), SpecError)), "raised", "SpecError", culprit)


@pytest.mark.parametrize(("key", "limit"), [("clusters", 10_000), ("datasets", 100_000), ("regions", 10_000)])
def test_too_many_entries_are_refused_before_any_is_validated(key: str, limit: int) -> None:
    """Counted before validation (the 654,000-cluster spec cost 4.1 GB); the file size limit bounds the
    YAML reading itself."""
    entry: object = {"name": "c", "conn_id": "k", "region": "r"} if key == "clusters" else "r"
    document = {"clusters": [{"name": "c", "conn_id": "k", "region": "r"}], key: [entry] * (limit + 1)}
    outcome = run_bounded(lambda: raised(lambda: load_spec(document), SpecError))
    check(*outcome, "raised", "SpecError", f"{key}: {limit + 1:,} entries")


# (id, snapshot text, culprit) -> load_snapshots raises SpecError
SNAPSHOT_CASES: list[tuple[str, str, str]] = [
    ("node cpu 1e999999999", SNAPSHOTS.replace('cpu: "8"', 'cpu: "1e999999999"', 1), "clusters[0].nodes[0]"),
    (
        "node memory 5000 digits",
        SNAPSHOTS.replace("memory: 32Gi", "memory: " + "9" * 5000, 1),
        "clusters[0].nodes[0].allocatable.memory",
    ),
    ("cpu lots", SNAPSHOTS.replace('cpu: "8"', "cpu: lots", 1), "clusters[0].nodes[0]"),
    (
        "observed_at year 9999",
        SNAPSHOTS.replace("2025-06-01T08:00:00Z", "9999-12-31T23:59:59Z", 1),
        "observed_at",
    ),
    (
        "duplicate cluster key",
        SNAPSHOTS.replace("- cluster: cn-a", "- cluster: cn-a\n    cluster: eu-a"),
        "clusters[1].cluster: duplicate key",
    ),
    (
        "nodes a string",
        SNAPSHOTS.replace('nodes: [{name: n1, allocatable: {cpu: "8", memory: 32Gi}}]', "nodes: x", 1),
        "clusters[0].nodes",
    ),
    ("alias bomb", ALIAS_BOMB, "YAML nodes"),
]


@pytest.mark.parametrize(
    ("text", "culprit"), [case[1:] for case in SNAPSHOT_CASES], ids=[c[0] for c in SNAPSHOT_CASES]
)
def test_bad_snapshot_text_is_a_spec_error_naming_the_field(text: str, culprit: str) -> None:
    check(
        *run_bounded(lambda: raised(lambda: load_snapshots(text), SpecError)), "raised", "SpecError", culprit
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("hostile")
    paths = {"spec": folder / "fed.yaml", "snap": folder / "snap.yaml", "dir": folder / "a-dir"}
    paths["spec"].write_text(SPEC)
    paths["snap"].write_text(SNAPSHOTS)
    paths["dir"].mkdir()
    paths["dup"] = folder / "dup.yaml"
    paths["dup"].write_text(SPEC + "    allowed_regions: [cn-east-1]\n")
    paths["big"] = folder / "big.yaml"
    with open(paths["big"], "wb") as handle:  # sparse: 50 MB on paper, nothing on disk
        handle.truncate(50 * 2**20)
    paths["fifo"] = folder / "fifo"
    os.mkfifo(paths["fifo"])
    paths["future"] = folder / "future.yaml"
    paths["future"].write_text(SNAPSHOTS.replace("2025-06-01", "2099-06-01", 1))
    paths["colon"] = folder / "fed:prod.yaml"
    paths["colon"].write_text("clusters: [")
    paths["kubeconfig-bomb"] = folder / "kubeconfig"
    paths["kubeconfig-bomb"].write_text(ALIAS_BOMB)
    paths["kubeconfig-contexts"] = folder / "kubeconfig-y"
    paths["kubeconfig-contexts"].write_text(
        "clusters: [{name: a, cluster: {server: https://a}}]\ncontexts: y\n"
    )
    return {name: str(path) for name, path in paths.items()}


PLACE = ["place", "--federation", "{spec}", "--snapshots", "{snap}"]
# (id, argv with {file} placeholders, culprit): `fedsched ...` exits 2 naming the option or field
CLI_CASES: list[tuple[str, list[str], str]] = [
    ("--cpu 1e999999999", [*PLACE, "--cpu", "1e999999999"], "--cpu"),
    ("--cpu lots", [*PLACE, "--cpu", "lots"], "--cpu"),
    ("--cpu negative", [*PLACE, "--cpu", "-1"], "--cpu"),
    ("--memory 5000 digits", [*PLACE, "--memory", "9" * 5000], "--memory"),
    ("--resource no value", [*PLACE, "--resource", "example.com/fpga"], "--resource"),
    ("--resource gpu=-1", [*PLACE, "--resource", "nvidia.com/gpu=-1"], "--resource: "),
    ("--gpu -1", [*PLACE, "--gpu", "-1"], "--gpu: "),
    (
        "--federation /dev/zero",
        ["place", "--federation", "/dev/zero", "--snapshots", "{snap}"],
        "character device",
    ),
    ("--federation a directory", ["place", "--federation", "{dir}", "--snapshots", "{snap}"], "directory"),
    ("--federation a FIFO", ["place", "--federation", "{fifo}", "--snapshots", "{snap}"], "named pipe"),
    ("--federation 50 MB", ["place", "--federation", "{big}", "--snapshots", "{snap}"], "more than the"),
    (
        "--federation missing",
        ["place", "--federation", "/no/such/fed.yaml", "--snapshots", "{snap}"],
        "/no/such/fed.yaml",
    ),
    (
        "--federation with a colon",
        ["place", "--federation", "{colon}", "--snapshots", "{snap}"],
        "malformed YAML",
    ),
    (
        "--federation duplicate key",
        ["place", "--federation", "{dup}", "--snapshots", "{snap}"],
        "duplicate key",
    ),
    (
        "--snapshots /dev/zero",
        ["place", "--federation", "{spec}", "--snapshots", "/dev/zero"],
        "character device",
    ),
    (
        "--snapshots observed in 2099",
        ["place", "--federation", "{spec}", "--snapshots", "{future}"],
        "in the future",
    ),
    ("--now 9999", [*PLACE, "--now", "9999-12-31T23:59:59Z"], "--now"),
    ("--now garbage", [*PLACE, "--now", "yesterday"], "--now"),
    ("--duration inf", [*PLACE, "--duration", "inf"], "--duration"),
    ("--duration 1e300", [*PLACE, "--duration", "1e300"], "--duration"),
    ("--duration nan", [*PLACE, "--duration", "nan"], "--duration"),
    ("--width 0", [*PLACE, "--width", "0"], "--width"),
    ("--width abc", [*PLACE, "--width", "abc"], "--width"),
    ("--weight 1e308", [*PLACE, "--weight", "cost=1e308"], "weights.cost"),
    ("--weight nan", [*PLACE, "--weight", "cost=nan"], "cost"),
    ("--forecast 2", [*PLACE, "--forecast", "eu-a=2"], "--forecast"),
    ("--forecast nan", [*PLACE, "--forecast", "eu-a=nan"], "--forecast"),
    ("--toleration exists", [*PLACE, "--toleration", "a=b:exists"], "exists"),
    ("--namespace ../x", [*PLACE, "--namespace", "../x"], "--namespace"),
    ("--dataset unknown", [*PLACE, "--dataset", "eu-custmers"], "eu-custmers"),
    ("--cluster unknown", [*PLACE, "--cluster", "mars"], "mars"),
    ("--timeout inf", [*PLACE, "--live", "--timeout", "inf"], "--timeout"),
    ("--timeout nan", [*PLACE, "--live", "--timeout", "nan"], "--timeout"),
    ("--timeout 0", ["snapshot", "--federation", "{spec}", "--timeout", "0"], "--timeout"),
    (
        "--kubeconfig alias bomb",
        ["snapshot", "--federation", "{spec}", "--kubeconfig", "{kubeconfig-bomb}"],
        "YAML nodes",
    ),
    (
        "--kubeconfig contexts: y",
        ["snapshot", "--federation", "{spec}", "--kubeconfig", "{kubeconfig-contexts}"],
        "contexts",
    ),
    (
        "--kubeconfig /dev/zero",
        ["snapshot", "--federation", "{spec}", "--kubeconfig", "/dev/zero"],
        "--kubeconfig",
    ),
    (
        "plan --horizon 1e300",
        ["plan", "--federation", "{spec}", "--horizon", "1e300", "--dry-run"],
        "--horizon",
    ),
    (
        "plan --valid-for inf",
        ["plan", "--federation", "{spec}", "--valid-for", "inf", "--dry-run"],
        "--valid-for",
    ),
    (
        "plan --dags-folder /dev/zero",
        ["plan", "--federation", "{spec}", "--dags-folder", "/dev/zero", "--dry-run"],
        "--dags-folder",
    ),
    ("plan --runs 0", ["plan", "--federation", "{spec}", "--runs", "0", "--dry-run"], "--runs"),
    ("plan --runs 1e20", ["plan", "--federation", "{spec}", "--runs", "1e20", "--dry-run"], "--runs"),
    (
        "plan --fallbacks -1",
        ["plan", "--federation", "{spec}", "--fallbacks", "-1", "--dry-run"],
        "--fallbacks",
    ),
]


@pytest.mark.parametrize(("argv", "culprit"), [case[1:] for case in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_bad_command_line_exits_2_naming_the_option(
    files: dict[str, str], argv: list[str], culprit: str
) -> None:
    filled = [part.format(**files) if part.startswith("{") else part for part in argv]
    check(*run_bounded(lambda: cli_outcome(filled)), "exit", 2, culprit)


def test_json_output_is_valid_json_and_a_closed_pipe_is_quiet(files: dict[str, str]) -> None:
    """``--json | head``: exit 141 without a traceback; ``--json`` never prints Infinity."""
    import subprocess
    import sys

    command = [
        str(Path(sys.executable).with_name("fedsched")),
        *[p.format(**files) if p.startswith("{") else p for p in PLACE],
        "--cpu",
        "1",
        "--json",
    ]
    reader = subprocess.run(
        f"{' '.join(map(repr, command))} | head -c 10", shell=True, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in reader.stderr and "BrokenPipe" not in reader.stderr, reader.stderr
    assert len(reader.stdout) == 10
    whole = cli_outcome(
        [
            *[p.format(**files) if p.startswith("{") else p for p in PLACE],
            "--cpu",
            "1",
            "--json",
            "--weight",
            "cost=1000000",
        ]
    )
    assert whole.value == 0 and "Infinity" not in whole.message and "NaN" not in whole.message


def _cases() -> int:
    return len(SPEC_CASES) + len(SNAPSHOT_CASES) + len(CLI_CASES)


def test_the_tables_hold_their_share_of_the_80_cases() -> None:
    assert _cases() >= 70
