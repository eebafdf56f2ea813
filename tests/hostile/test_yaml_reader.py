"""The one YAML reader (``federation/documents.py``): merge keys in every file it reads, limits checked while
reading (a document past one is refused where it breaks it, not once built), errors naming the path, line
and column."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.federation import SpecError, load_snapshots, load_spec
from airflow_provider_fedsched.federation.documents import parse_yaml
from airflow_provider_fedsched.federation.limits import (
    MAX_CLUSTERS,
    MAX_TENANTS,
    SNAPSHOT_LIMITS,
    SPEC_LIMITS,
    DocumentLimits,
)
from airflow_provider_fedsched.kube.access import ClusterAccessError, access_from_extras
from airflow_provider_fedsched.sim.config import SimConfigError, load_config
from airflow_provider_fedsched.validation.kubeconfig import load_kubeconfig
from tests.hostile.harness import check, cli_outcome, raised, run_bounded

MERGES = [
    "base: &b {a: 1, d: [1, 2]}\nx:\n  <<: *b\n  c: 2\n",
    "base: &b {a: 1, d: [1, 2]}\nx:\n  c: 2\n  <<: *b\n  a: 3\n",  # written keys win, wherever they are
    "p: &p {a: 1, b: 1}\nq: &q {b: 2, c: 2}\nx: {<<: [*p, *q], c: 3}\n",  # earlier merged mappings win
    "x: {<<: {a: 1}, b: 2}\n",  # a mapping written in place
    "p: &p {a: 1}\nq: &q {<<: *p, b: 2}\nx: {<<: *q, c: 3}\n",  # a merge of a merge
    "x: {'<<': 1}\ny: <<\n",  # a quoted '<<' is a key like any other; '<<' as a value is text
]


@pytest.mark.parametrize("text", MERGES)
def test_merge_keys_read_as_yaml_says(text: str) -> None:
    assert parse_yaml(text, "test") == yaml.safe_load(text.replace("y: <<", "y: '<<'"))


# (id, document, the culprit the message must name)
REFUSED = [
    (
        "empty explicit int (found by the fuzz test)",
        "name: &a0 !!int ''\n",
        "name: '' is not a valid YAML int",
    ),
    ("merge of a scalar", "x:\n  <<: 5\n", "x.<<: a merge key takes a mapping"),
    ("merge of a list of scalars", "x: {<<: [1, 2]}\n", "x.<<: a merge key takes a mapping"),
    ("two merge keys", "p: &p {a: 1}\nx:\n  <<: *p\n  <<: *p\n", "x.<<: duplicate key (lines 3 and 4)"),
    ("recursive merge", "x: &x {<<: *x}\n", "recursive YAML alias"),
    ("undefined alias", "x: {<<: *nothing}\n", "undefined YAML alias *nothing"),
    (
        "python tag",
        "x: !!python/object/apply:os.system [ls]\n",
        "x: unsupported YAML tag !!python/object/apply:os.system",
    ),
    ("set tag", "x: !!set {a, b}\n", "x: unsupported YAML tag"),
    ("list as a key", "? [1, 2]\n: x\n", "a mapping key that is a list or a mapping"),
    ("aliased list as a key", "a: &a [1]\nb: {*a : 1}\n", "b: a mapping key that is a list or a mapping"),
    ("1 and true are one key", "x:\n  1: a\n  true: b\n", "x.True: duplicate key (lines 2 and 3)"),
    ("two documents", "a: 1\n---\nb: 2\n", "a second YAML document"),
]


@pytest.mark.parametrize(("text", "culprit"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_naming_path_line_and_column(text: str, culprit: str) -> None:
    outcome = run_bounded(lambda: raised(lambda: parse_yaml(text, "test"), SpecError))
    check(*outcome, "raised", "SpecError", culprit)
    assert "(in test at line " in outcome[0].message and ", column " in outcome[0].message


def test_a_spec_with_merge_keys(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "clusters:\n  - &a {name: eu-a, conn_id: k8s, region: eu-west-1}\n  - {<<: *a, name: eu-b}\n"
    )
    spec = load_spec(path)
    assert [(c.name, c.conn_id, c.region) for c in spec.clusters] == [
        ("eu-a", "k8s", "eu-west-1"),
        ("eu-b", "k8s", "eu-west-1"),
    ]
    path.write_text("clusters:\n  - &a {name: eu-a, conn_id: k8s, region: r}\n  - {<<: *a}\n")
    with pytest.raises(SpecError, match="duplicate cluster name"):  # merged values are checked like any
        load_spec(path)


def test_a_snapshot_file_with_merge_keys() -> None:
    text = textwrap.dedent(
        """\
        clusters:
          - cluster: eu-a
            observed_at: 2025-06-01T08:00:00Z
            nodes:
              - &n {name: n1, allocatable: {cpu: "8", memory: 32Gi}, labels: {pool: a}}
              - {<<: *n, name: n2}
        """
    )
    nodes = load_snapshots(text)["eu-a"].nodes
    assert [(n.name, n.labels["pool"]) for n in nodes] == [("n1", "a"), ("n2", "a")]


def _kubeconfig_with_merge_key() -> str:
    return textwrap.dedent(
        """\
        x-cluster: &server {server: "https://127.0.0.1:1"}
        clusters:
          - name: a
            cluster: {<<: *server}
        contexts: [{name: a, context: {cluster: a, user: u}}]
        users: [{name: u, user: {token: s3cr3t-token}}]
        current-context: a
        """
    )


def test_a_member_connection_kubeconfig_with_merge_keys() -> None:
    text = _kubeconfig_with_merge_key()
    assert load_kubeconfig(text)["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:1"}
    access = access_from_extras("eu-a", "k8s_eu_a", "kubernetes", {"kube_config": text}, None)
    assert access.cluster == "eu-a"


def test_a_bad_merge_in_one_member_connection_is_that_member_s_error() -> None:
    text = _kubeconfig_with_merge_key().replace("{<<: *server}", "{<<: [1]}")

    def resolve() -> Any:
        return access_from_extras("eu-a", "k8s_eu_a", "kubernetes", {"kube_config": text}, None)

    outcome, elapsed, peak = run_bounded(lambda: raised(resolve, ClusterAccessError))
    check(outcome, elapsed, peak, "raised", "ClusterAccessError", "clusters[0].cluster.<<: a merge key")
    assert outcome.message.startswith("cluster 'eu-a' (connection 'k8s_eu_a'): ")
    assert "s3cr3t-token" not in outcome.message


def test_a_simulator_configuration_with_merge_keys(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(
        "clusters:\n"
        "  - &c {name: a, region: eu-west-1, node_pools: [{name: p, count: 2}]}\n"
        "  - {<<: *c, name: b}\n"
    )
    config = load_config(path)
    assert [(c.name, c.region, c.node_pools[0].count) for c in config.clusters] == [
        ("a", "eu-west-1", 2),
        ("b", "eu-west-1", 2),
    ]
    path.write_text("clusters:\n  - {<<: 1, name: a}\n")
    with pytest.raises(SimConfigError, match=r"clusters\[0\]\.<<: a merge key .* line 2, column 6"):
        load_config(path)


# -- limits checked while reading -------------------------------------------------------------------------
def test_a_spec_with_too_many_clusters_is_refused_at_the_first_one_too_many(tmp_path: Path) -> None:
    lines = [f"  - {{name: c{i}, conn_id: k, region: r}}\n" for i in range(MAX_CLUSTERS + 5_000)]
    path = tmp_path / "spec.yaml"
    path.write_text("clusters:\n" + "".join(lines))
    outcome = run_bounded(lambda: raised(lambda: load_spec(path), SpecError))
    check(*outcome, "raised", "SpecError", f"clusters: more than the {MAX_CLUSTERS:,} entries allowed")
    assert f"at line {MAX_CLUSTERS + 2}, column 5" in outcome[0].message
    assert str(path) in outcome[0].message


def test_tenants_are_counted_in_a_spec() -> None:
    tenants = "".join(f"  - {{name: t{i}}}\n" for i in range(MAX_TENANTS + 1))
    outcome = run_bounded(
        lambda: raised(
            lambda: load_spec("clusters: [{name: a, conn_id: k}]\ntenants:\n" + tenants), SpecError
        )
    )
    check(*outcome, "raised", "SpecError", f"tenants: more than the {MAX_TENANTS:,} entries allowed")
    with pytest.raises(SpecError, match="tenants"):  # a mapping handed in is counted too
        load_spec(
            {"clusters": [{"name": "a", "conn_id": "k"}], "tenants": [{"name": "t"}] * (MAX_TENANTS + 1)}
        )


def test_nodes_of_one_snapshot_are_counted_while_reading() -> None:
    limits = dict(SNAPSHOT_LIMITS.max_items)
    assert limits["clusters"] == MAX_CLUSTERS and "clusters[].nodes" in limits
    small = DocumentLimits(max_bytes=2**20, max_nodes=10_000, max_items=(("clusters[].nodes", 3),))
    text = "clusters:\n  - nodes: [{name: a}, {name: b}, {name: c}]\n  - nodes: [1, 2, 3, 4]\n"
    with pytest.raises(
        SpecError, match=r"clusters\[1\]\.nodes: more than the 3 entries allowed .*line 3, column 22"
    ):
        parse_yaml(text, "test", small)


def test_an_alias_counts_every_node_it_stands_for() -> None:
    small = DocumentLimits(max_bytes=2**20, max_nodes=100)
    text = "a: &a [" + ", ".join(["1"] * 40) + "]\nb: *a\nc: *a\n"
    with pytest.raises(SpecError, match=r"c: the document has more than 100 YAML nodes .* line 3, column 4"):
        parse_yaml(text, "test", small)
    deep = DocumentLimits(max_bytes=2**20, max_nodes=100, max_depth=5)
    with pytest.raises(SpecError, match=r"nested deeper than 5"):
        parse_yaml("a: &a [[[1]]]\nb: [*a]\n", "test", deep)
    assert parse_yaml("a: &a [[[1]]]\nb: *a\n", "test", deep) == {"a": [[[1]]], "b": [[[1]]]}


def test_the_spec_limits_name_every_list_checked_by_load_spec() -> None:
    assert {key for key, _ in SPEC_LIMITS.max_items} == {"clusters", "regions", "datasets", "tenants"}


def test_a_merge_key_in_a_cli_spec_is_read(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "clusters:\n  - &a {name: eu-a, conn_id: k8s, region: eu-west-1}\n  - {<<: *a, name: eu-b}\n"
    )
    snapshots = tmp_path / "snapshots.json"
    node = {"name": "n1", "allocatable": {"cpu": "8", "memory": "32Gi"}}
    snapshots.write_text(
        json.dumps(
            {
                "clusters": [
                    {"cluster": name, "observed_at": "2025-06-01T08:00:00Z", "nodes": [node]}
                    for name in ("eu-a", "eu-b")
                ]
            }
        )
    )
    outcome = cli_outcome(
        [
            "place",
            "--federation",
            str(spec),
            "--snapshots",
            str(snapshots),
            "--now",
            "2025-06-01T08:00:10Z",
            "--json",
        ]
    )
    assert outcome.value == 0, outcome.message
