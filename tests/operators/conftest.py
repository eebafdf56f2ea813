"""A simulated federation wired into the session's Airflow: connections, spec and a fresh shared state."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# Imported once here, before any DagBag parses a DAG file: on a loaded machine the first import of the
# cncf.kubernetes provider alone can exceed Airflow's 30 s DAG import timeout.
import airflow_provider_fedsched.operators.federated_pod  # noqa: F401
from airflow_provider_fedsched.sim import SimFederation

# Simulated time runs 10x faster: a pod's default 1 s run takes 0.1 s.
TIME_SCALE = 0.1


@pytest.fixture(scope="module")
def sim_federation(airflow_db: None) -> Iterator[SimFederation]:
    with SimFederation(time_scale=TIME_SCALE) as fed:
        for cluster in fed.clusters.values():
            fed.call(cluster.create_namespace, "etl")
        saved = {key: os.environ.get(key) for key in fed.airflow_env_vars()}
        os.environ.update(fed.airflow_env_vars())
        yield fed
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def federation(sim_federation: SimFederation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sim's federation spec under a fresh name, so no cooldown or snapshot leaks between tests.

    Snapshots live for 120 s (reused for up to 60 s): tests change a cluster right after a snapshot to
    play "another tenant took the capacity since the last snapshot".
    """
    spec = yaml.safe_load((sim_federation.state_dir / "federation.yaml").read_text())
    spec["name"] = f"test-{uuid.uuid4().hex[:8]}"
    spec["policy"]["snapshot_ttl_seconds"] = 120
    spec["policy"]["cooldown_seconds"] = 120
    path = tmp_path / "federation.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("AIRFLOW__FEDSCHED__FEDERATION_SPEC", str(path))
    # dag.test() runs triggers inline, with no scheduler to race: deferrals need no floor here.
    monkeypatch.setenv("AIRFLOW__FEDSCHED__MIN_DEFERRAL_SECONDS", "0.5")
    return path


@pytest.fixture
def pods_ran() -> Callable[[SimFederation], dict[str, list[dict[str, Any]]]]:
    """Every pod each member ran, as the member itself recorded it (deleted pods included): here the
    simulator's execution journal; on the test bed (tests/conformance) the API servers' audit logs."""

    def journals(fed: SimFederation) -> dict[str, list[dict[str, Any]]]:
        return {name: handle.journal() for name, handle in fed.handles.items()}

    return journals
