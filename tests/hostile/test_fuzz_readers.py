"""Fuzzing each reader of user files and arguments (hypothesis): the federation spec and the snapshot file
(through ``fedsched place``), a member connection's kubeconfig, the replay's CSV files and the replay's
options. Whatever is generated (anchors, aliases, merge keys, tags, duplicate keys, hostile scalars,
hostile numbers), each ends as an answer or a clean refusal: exit 2 (the CLI) or the reader's error, one
message naming the path, option, file or connection at fault, no traceback, under 2 s and bounded memory
(``harness.check``). A differential property checks the reader against PyYAML where both read a document.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_fedsched.federation import SpecError
from airflow_provider_fedsched.federation.documents import parse_yaml
from airflow_provider_fedsched.kube.access import ClusterAccessError, access_from_extras
from airflow_provider_fedsched.replay.workload import ReplayInputError, read_nodes, read_pods
from tests.hostile.harness import MEMORY_LIMIT, TIME_LIMIT, Outcome, cli_outcome, raised, run_bounded
from tests.replay.fixture import write_trace

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SCALARS = [
    "eu-west-1",
    "k8s_a",
    "a",
    "0",
    "-1",
    "1.5",
    "1e308",
    "1e999999999",
    ".nan",
    ".inf",
    "-.inf",
    "true",
    "~",
    "null",
    "''",
    '"x: y"',
    "2025-13-45",
    "2025-06-01T08:00:00Z",
    "0x1F",
    "0o17",
    "500m",
    "8Gi",
    "<<",
    "=",
    "9" * 4400,
    "{pod:>99999}",
    "javascript:x",
    "NoSchedule",
]
TAGS = [
    "",
    "",
    "",
    "",
    "!!str ",
    "!!int ",
    "!!float ",
    "!!python/object:os.system ",
    "!!set ",
    "!x ",
    "!!binary ",
]


@st.composite
def yaml_text(draw: st.DrawFn, keys: list[str]) -> str:
    """A document of ``keys`` (block style) whose values are flow nodes with anchors, aliases to earlier
    (or enclosing) anchors, merge keys, tags and hostile scalars."""
    anchors: list[str] = []

    def node(depth: int) -> str:
        kind = draw(st.integers(0, 5 if depth < 4 else 1))
        if kind == 1 and anchors:
            return "*" + draw(st.sampled_from(anchors))
        prefix = ""
        if draw(st.integers(0, 4)) == 0:
            name = f"a{len(anchors)}"
            prefix = f"&{name} "
            anchors.append(name)  # before the children: an alias inside is a recursive one
        if kind <= 1:
            return prefix + draw(st.sampled_from(TAGS)) + draw(st.sampled_from(SCALARS))
        if kind == 2:
            items = [node(depth + 1) for _ in range(draw(st.integers(0, 4)))]
            return prefix + draw(st.sampled_from(TAGS[:5])) + "[" + ", ".join(items) + "]"
        entries = []
        for _ in range(draw(st.integers(0, 4))):
            if anchors and draw(st.integers(0, 3)) == 0:
                merged = draw(st.lists(st.sampled_from(anchors), min_size=1, max_size=3))
                value = (
                    "*" + merged[0] if len(merged) == 1 else "[" + ", ".join("*" + m for m in merged) + "]"
                )
                entries.append(f"<<: {value}")
            else:
                entries.append(f"{draw(st.sampled_from([*keys, '1', 'true', '<<']))}: {node(depth + 1)}")
        return prefix + "{" + ", ".join(entries) + "}"

    lines = [f"{draw(st.sampled_from(keys))}: {node(0)}" for _ in range(draw(st.integers(1, 5)))]
    return "\n".join(lines) + "\n"


SPEC_KEYS = ["name", "clusters", "datasets", "regions", "tenants", "policy", "conn_id", "region", "cluster"]
SNAPSHOT_KEYS = ["clusters", "cluster", "observed_at", "nodes", "name", "allocatable", "requested", "labels"]
KUBECONFIG_KEYS = ["clusters", "contexts", "users", "current-context", "cluster", "context", "user", "name"]

GOOD_SPEC = "clusters:\n  - {name: eu-a, conn_id: k8s_eu_a, region: eu-west-1}\n"
GOOD_SNAPSHOTS = json.dumps(
    {
        "clusters": [
            {
                "cluster": "eu-a",
                "observed_at": "2025-06-01T08:00:00Z",
                "nodes": [{"name": "n1", "allocatable": {"cpu": "8", "memory": "32Gi"}}],
            }
        ]
    }
)
PATH = re.compile(r"^(<root>|[\w\-./~ ]+(\[\d+\])?([.\[][^:\s]*)*): ")
"""A message that starts with the path of the culprit (``clusters[0].region: ...``)."""


def _bounded(action: Callable[[], Outcome]) -> Outcome:
    outcome, elapsed, peak = run_bounded(action)
    assert "Traceback" not in outcome.message, outcome.message
    assert elapsed < TIME_LIMIT, f"took {elapsed:.2f}s"
    assert peak < MEMORY_LIMIT, f"raised the peak memory by {peak / 2**20:.0f} MiB"
    return outcome


def _place(spec: str, snapshots: str) -> Outcome:
    with tempfile.TemporaryDirectory() as folder:
        spec_path, snapshot_path = Path(folder) / "spec.yaml", Path(folder) / "snapshots.yaml"
        spec_path.write_text(spec)
        snapshot_path.write_text(snapshots)
        argv = ["place", "--federation", str(spec_path), "--snapshots", str(snapshot_path)]
        return _bounded(lambda: cli_outcome([*argv, "--now", "2025-06-01T08:00:10Z", "--json"]))


def _refused_naming(outcome: Outcome, file: str, text: str) -> None:
    """Exit 2 with one line naming the file and a path in it (or an answer: 0 placed, 3 not placed)."""
    if outcome.value in (0, 3):
        return
    assert outcome.value == 2, outcome.message
    line = outcome.message.strip().splitlines()[-1]
    assert line.startswith("fedsched place: error: "), line
    assert file in line, line
    problem = line.split(f"{file}", 1)[1]
    assert re.search(r"(<root>|[\w\]]): ", problem) or "file" in problem, line


@FUZZ
@given(yaml_text(SPEC_KEYS), st.booleans())
def test_fuzzed_spec_files(text: str, append: bool) -> None:
    text = GOOD_SPEC + text if append else text
    _refused_naming(_place(text, GOOD_SNAPSHOTS), "spec.yaml", text)


@FUZZ
@given(yaml_text(SNAPSHOT_KEYS), st.booleans())
def test_fuzzed_snapshot_files(text: str, append: bool) -> None:
    text = (
        "clusters: [{cluster: eu-a, observed_at: 2025-06-01T08:00:00Z, nodes: []}]\n" + text
        if append
        else text
    )
    _refused_naming(_place(GOOD_SPEC, text), "snapshots.yaml", text)


KUBECONFIG = (
    "clusters: [{name: a, cluster: {server: 'https://127.0.0.1:1'}}]\n"
    "contexts: [{name: a, context: {cluster: a, user: u}}]\n"
    "users: [{name: u, user: {token: s3cr3t-token}}]\n"
    "current-context: a\n"
)


@FUZZ
@given(yaml_text(KUBECONFIG_KEYS), st.booleans())
def test_fuzzed_member_kubeconfigs(text: str, append: bool) -> None:
    document = KUBECONFIG + text if append else text

    def resolve() -> Any:
        return access_from_extras("eu-a", "k8s_eu_a", "kubernetes", {"kube_config": document}, None)

    outcome = _bounded(lambda: raised(resolve, ClusterAccessError))
    if outcome.value is None:
        return  # a usable member
    assert outcome.message.startswith("cluster 'eu-a' (connection 'k8s_eu_a'): "), outcome.message
    assert "s3cr3t-token" not in outcome.message


def _same(left: Any, right: Any) -> bool:
    """Equal, NaN equal to NaN (``.nan`` reads as a float that equals nothing)."""
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right):
        return True
    if isinstance(left, dict) and isinstance(right, dict):
        return list(left) == list(right) and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return type(left) is type(right) and left == right


@FUZZ
@given(yaml_text(SPEC_KEYS))
def test_the_reader_reads_what_pyyaml_reads(text: str) -> None:
    """Where both read a document, they read the same; where the reader refuses, its message names a path."""
    try:
        ours = parse_yaml(text, "fuzz")
    except SpecError as exc:
        message = str(exc)
        assert (PATH.match(message) and " (in fuzz at line " in message) or "malformed YAML" in message, (
            message
        )
        return
    try:
        theirs = yaml.load(text, Loader=yaml.CSafeLoader)
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError):
        return  # the reader reads some PyYAML cannot: `<<` or `=` as a value
    assert _same(ours, theirs), (ours, theirs)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_trace(tmp_path_factory.mktemp("fuzz-trace"), pods=12)


NUMBERS = [
    "0",
    "1",
    "1000",
    "1e3",
    "1.5",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "9" * 4000,
    "",
    " ",
    "x",
    "0x10",
]
NUMBERS += ["1" + "0" * 12, "1" + "0" * 13, "1_000", "١٢٣"]


@st.composite
def csv_text(draw: st.DrawFn, columns: list[str]) -> str:
    header = draw(st.permutations(columns)) if draw(st.booleans()) else columns
    header = header[: draw(st.integers(len(columns) - 1, len(columns)))]
    rows = []
    for number in range(draw(st.integers(0, 6))):
        cells = [
            draw(st.sampled_from([*NUMBERS, f"n{number}", f"n{number % 2}", '"a,b"', "LS", "BE", "T4"]))
            for _ in header
        ]
        rows.append(",".join(cells))
    return ",".join(header) + "\n" + "\n".join(rows) + ("\n" if draw(st.booleans()) else "")


POD_FIELDS = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "qos",
    "creation_time",
    "deletion_time",
]
NODE_FIELDS = ["sn", "cpu_milli", "memory_mib", "gpu", "model", "cluster"]


@FUZZ
@given(st.data())
def test_fuzzed_replay_csv_files(data: st.DataObject) -> None:
    for fields, read in ((POD_FIELDS, read_pods), (NODE_FIELDS, read_nodes)):
        text = data.draw(csv_text(fields))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "input.csv"
            path.write_text(text)
            outcome = _bounded(lambda read=read, path=path: raised(lambda: read(path), ReplayInputError))
            if outcome.value is not None:
                assert str(path) in outcome.message, outcome.message
                if " line " in outcome.message:
                    assert re.search(r" line \d+: [a-z_]+: ", outcome.message), outcome.message


OPTIONS = {
    "--window": ["0", "60", "nan", "inf", "-1", "1e308", "9" * 4000, "x"],
    "--max-run": ["1", "60", "0", "nan", "-inf", "1e308"],
    "--staleness": ["0", "10", "nan", "-1", "1e300"],
    "--copies": ["1", "2", "0", "-1", "1001", "1000000000", "1.5", "9" * 5000],
    "--clusters": ["1", "2", "0", "1001", "1000000", "9" * 4000],
    "--seed": ["0", "-5", str(2**63), "x"],
    "--plot": ["/dev/null", "/tmp", "/nonexistent/x.png", "x.txt", "/dev/null/x.png"],
    "--policies": ["home", "fedsched,home", "nothing", ",", ""],
}


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(OPTIONS)), st.integers(0, 100), min_size=1, max_size=4))
def test_fuzzed_replay_options(trace: tuple[Path, Path], chosen: dict[str, int]) -> None:
    nodes, pods = trace
    argv = [
        "replay",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--no-progress",
        "--json",
        "--policies",
        "home",
    ]
    for option, pick in chosen.items():
        values = OPTIONS[option]
        argv += [option, values[pick % len(values)]]  # the last --policies wins
    outcome = _bounded(lambda: cli_outcome(argv))
    if outcome.value == 0:
        with contextlib.suppress(json.JSONDecodeError):
            assert "policies" in json.loads(outcome.message)
        return
    assert outcome.value == 2, outcome.message
    line = outcome.message.strip().splitlines()[-1]
    assert line.startswith("fedsched replay: error: "), line
    assert any(option in line for option in chosen), line
