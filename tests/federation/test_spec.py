from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fedsched.federation import (
    FederationSpec,
    PolicySpec,
    SpecError,
    load_snapshots,
    load_spec,
    spec_fingerprint,
)
from airflow_provider_fedsched.federation.snapshot import dump_snapshots

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"

BASE: dict[str, Any] = {
    "clusters": [
        {"name": "east", "conn_id": "k8s_east", "region": "cn-east-1", "taints": []},
        {"name": "west", "conn_id": "k8s_west", "region": "eu-west-1", "prices": {"cpu_hour": 0.05}},
    ],
    "datasets": [
        {"name": "a", "cluster": "east", "size_gb": 1},
        {"name": "b", "cluster": "east", "size_gb": 1},
        {"name": "c", "cluster": "west", "size_gb": 1, "allowed_regions": ["eu-west-1"]},
    ],
    "policy": {"weights": {"cost": 1}},
}


def mutated(path: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    target: Any = document
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return document


def test_example_federation_loads_and_group_defaults_to_region() -> None:
    spec = load_spec(EXAMPLES / "federation.yaml")
    assert [c.name for c in spec.clusters] == ["east-cpu", "north-gpu", "west-general"]
    loaded = load_spec(BASE)
    assert loaded.clusters[0].group == "cn-east-1"
    assert loaded.policy.weights.locality == 1.0  # unspecified weights keep their defaults


def test_spec_loads_from_yaml_text_and_fingerprint_is_stable() -> None:
    text = (EXAMPLES / "federation.yaml").read_text()
    from_text = load_spec(text)
    from_path = load_spec(str(EXAMPLES / "federation.yaml"))
    assert spec_fingerprint(from_text) == spec_fingerprint(from_path)
    changed = load_spec(text.replace("size_gb: 500", "size_gb: 501"))
    assert spec_fingerprint(changed) != spec_fingerprint(from_text)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (mutated("clusters.1.name", "east"), "clusters[1].name: duplicate cluster name 'east'"),
        (mutated("datasets.1.name", "a"), "datasets[1].name: duplicate dataset name 'a'"),
        (mutated("datasets.2.cluster", "nowhere"), "datasets[2].cluster: unknown cluster 'nowhere'"),
        (
            mutated("datasets.2.allowed_regions", ["eu-west-1", "mars-1"]),
            "datasets[2].allowed_regions[1]: unknown region 'mars-1' (known: cn-east-1, eu-west-1)",
        ),
        (mutated("datasets.0.size_gb", -5), "datasets[0].size_gb:"),
        (mutated("clusters.0.taints", [{"key": "k", "effect": "NoRun"}]), "clusters[0].taints[0].effect:"),
        (mutated("clusters.1.prices", {"cpu_hour": -0.1}), "clusters[1].prices.cpu_hour:"),
        (mutated("clusters.1.prices", {"egress_gb": math.inf}), "clusters[1].prices.egress_gb:"),
        (mutated("policy", {"weights": {"cost": math.nan}}), "policy.weights.cost:"),
        (mutated("policy", {"weights": {"cost": "heavy"}}), "policy.weights.cost:"),
        (
            mutated("policy", {"weights": {"speed": 1}}),
            "policy.weights.speed: Extra inputs are not permitted",
        ),
        (mutated("policy", {"filters": ["Freshness"]}), "policy.filters:"),
        (mutated("policy", {"scores": ["Cost", "Vibes"]}), "policy.scores:"),
        (mutated("clusters.0.colour", "blue"), "clusters[0].colour: Extra inputs are not permitted"),
        (mutated("clusters.0.dashboard_url", "https://x/{cluster}/{node}"), "clusters[0].dashboard_url:"),
        (mutated("clusters.0.name", ""), "clusters[0].name:"),
        (mutated("clusters.0.name", "east cpu"), "clusters[0].name: String should match pattern"),
        (mutated("clusters.0.conn_id", "k8s east"), "clusters[0].conn_id: String should match pattern"),
        (mutated("clusters.0.conn_id", "<script>"), "clusters[0].conn_id:"),
        (mutated("datasets.0.name", "a/b"), "datasets[0].name: String should match pattern"),
        ({"clusters": []}, "clusters:"),
    ],
)
def test_bad_specs_name_the_field_path(document: dict[str, Any], expected: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(document)
    assert expected in str(info.value)


def test_extra_regions_make_allowed_regions_valid() -> None:
    document = mutated("datasets.2.allowed_regions", ["mars-1"])
    document["regions"] = ["mars-1"]
    assert load_spec(document).datasets[2].allowed_regions == ["mars-1"]


def test_malformed_yaml_and_missing_file_are_spec_errors() -> None:
    with pytest.raises(SpecError, match=r"malformed YAML .* at line 3"):
        load_spec("clusters:\n  - name: [unclosed\n")
    with pytest.raises(SpecError, match="cannot read federation spec file"):
        load_spec("/nonexistent/federation.yaml")
    with pytest.raises(SpecError, match="must be a mapping"):
        load_spec("- just\n- a list\n")


def test_policy_merged_applies_per_task_overrides_and_validates_them() -> None:
    policy = PolicySpec()
    merged = policy.merged({"weights": {"cost": 3}, "snapshot_ttl_seconds": 60})
    assert merged.weights.cost == 3 and merged.weights.locality == policy.weights.locality
    assert merged.snapshot_ttl_seconds == 60
    assert policy.merged({}) is policy
    with pytest.raises(SpecError, match=r"policy\.weights\.cost"):
        policy.merged({"weights": {"cost": -1}})
    with pytest.raises(SpecError, match="mandatory"):
        policy.merged({"filters": ["ClusterSubset"]})


def test_spec_model_itself_rejects_cross_reference_errors() -> None:
    with pytest.raises(ValueError, match="duplicate cluster name"):
        FederationSpec.model_validate(mutated("clusters.1.name", "east"))


# ---------------------------------------------------------------- snapshot files


def test_example_snapshots_round_trip_through_dump() -> None:
    snapshots = load_snapshots(EXAMPLES / "snapshots.yaml")
    assert set(snapshots) == {"east-cpu", "north-gpu", "west-general"}
    gpu_node = next(n for n in snapshots["north-gpu"].nodes if n.name == "north-gpu-gpu-1")
    assert gpu_node.allocatable["nvidia.com/gpu"] == 2 and gpu_node.free["nvidia.com/gpu"] == 1
    assert snapshots["east-cpu"].observed_at.tzinfo is not None
    assert load_snapshots(dump_snapshots(snapshots)) == snapshots


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {
                "clusters": [
                    {
                        "cluster": "a",
                        "observed_at": "2025-01-01T00:00:00Z",
                        "nodes": [
                            {"name": "n0", "allocatable": {"cpu": "1"}},
                            {"name": "n1", "allocatable": {"cpu": "lots"}},
                        ],
                    }
                ]
            },
            "clusters[0].nodes[1].allocatable.cpu:",
        ),
        (
            {
                "clusters": [
                    {
                        "cluster": "a",
                        "observed_at": "2025-01-01T00:00:00Z",
                        "nodes": [
                            {"name": "n0", "allocatable": {"cpu": "1"}, "requested": {"memory": "-1Gi"}},
                        ],
                    }
                ]
            },
            "clusters[0].nodes[0].requested.memory: '-1Gi' is negative",
        ),
        (
            {"clusters": [{"cluster": "a", "observed_at": "yesterday"}]},
            "clusters[0].observed_at:",
        ),
        (
            {
                "clusters": [
                    {
                        "cluster": "a",
                        "observed_at": "2025-01-01T00:00:00Z",
                        "quota_headroom": {"team": {"cpu": "x"}},
                    }
                ]
            },
            "clusters[0].quota_headroom.team.cpu:",
        ),
        (
            {
                "clusters": [
                    {
                        "cluster": "a",
                        "observed_at": "2025-01-01T00:00:00Z",
                        "nodes": [
                            {"name": "n0", "allocatable": {}, "taints": [{"key": "k", "effect": "Sometimes"}]}
                        ],
                    }
                ]
            },
            "clusters[0].nodes[0].taints[0].effect:",
        ),
        (
            {
                "clusters": [
                    {"cluster": "a", "observed_at": "2025-01-01T00:00:00Z"},
                    {"cluster": "a", "observed_at": "2025-01-01T00:00:00Z"},
                ]
            },
            "clusters[1].cluster: duplicate snapshot for cluster 'a'",
        ),
        (
            {"clusters": [{"cluster": "a", "observed_at": "2025-01-01T00:00:00Z", "cpu": 1}]},
            "clusters[0].cpu:",
        ),
    ],
)
def test_bad_snapshot_files_name_the_field_path(document: dict[str, Any], expected: str) -> None:
    with pytest.raises(SpecError) as info:
        load_snapshots(document)
    assert expected in str(info.value)


def test_check_references_is_the_one_check_of_the_names_a_task_uses() -> None:
    spec = load_spec(mutated("policy", {}))
    names = [c.name for c in spec.clusters]
    assert [d.name for d in spec.check_references(clusters=names[:1], datasets=["a"], where="request")] == [
        "a"
    ]
    cases = [
        ({"clusters": [names[0], "moon"]}, "request.clusters[1]: unknown cluster 'moon' (known: "),
        ({"datasets": ["a", "nope"]}, "request.datasets[1]: unknown dataset 'nope' (known: a, "),
        ({"prefer_region": "mars-1"}, "request.prefer_region: unknown region 'mars-1' (known: cn-east-1,"),
        ({"prefer_group": "mars"}, "request.prefer_group: unknown group 'mars' (known: "),
    ]
    for arguments, message in cases:
        with pytest.raises(SpecError) as info:
            spec.check_references(**arguments, where="request")  # type: ignore[arg-type]
        assert str(info.value).startswith(message), str(info.value)
    with pytest.raises(SpecError, match=r"^datasets\[0\]: unknown dataset 'x'"):
        spec.check_references(datasets=["x"])  # the operator's arguments: no prefix
    with pytest.raises(SpecError, match=r"^--cooldown: unknown cluster 'moon'"):
        spec.check_clusters(["moon"], "--cooldown", indexed=False)
