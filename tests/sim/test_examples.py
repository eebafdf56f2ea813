"""The example spec and snapshots are the simulator's defaults: one source (sim/defaults.yaml)."""

from __future__ import annotations

from pathlib import Path

import yaml

from airflow_provider_fedsched.federation.snapshot import load_snapshots
from airflow_provider_fedsched.federation.spec import load_spec
from airflow_provider_fedsched.sim import SimFederation, default_config
from airflow_provider_fedsched.sim.config import federation_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"


def test_example_federation_is_the_simulators_default_spec(fed: SimFederation) -> None:
    generated = yaml.safe_dump(federation_spec(default_config()), sort_keys=False)
    assert load_spec(EXAMPLES / "federation.yaml") == load_spec(generated), (
        "example_dags/federation.yaml differs from the simulator's defaults (sim/defaults.yaml); "
        f"it should say:\n{generated}"
    )
    # What a running default simulator writes is the same spec.
    assert load_spec(fed.state_dir / "federation.yaml") == load_spec(generated)


def test_example_snapshots_describe_the_default_nodes(fed: SimFederation) -> None:
    snapshots = load_snapshots(EXAMPLES / "snapshots.yaml")
    assert set(snapshots) == {c.name for c in default_config().clusters}
    for handle in fed:
        nodes = {n["metadata"]["name"]: n for n in handle.nodes()}
        example = {n.name: n for n in snapshots[handle.name].nodes}
        assert set(example) == set(nodes), handle.name
        for name, node in nodes.items():
            assert example[name].labels == node["metadata"]["labels"], name
            assert [t.model_dump() for t in example[name].taints] == [
                {"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
                for t in node["spec"].get("taints") or []
            ], name
        raw = yaml.safe_load((EXAMPLES / "snapshots.yaml").read_text())
        for entry in next(c for c in raw["clusters"] if c["cluster"] == handle.name)["nodes"]:
            assert entry["allocatable"] == nodes[entry["name"]]["status"]["allocatable"], entry["name"]
