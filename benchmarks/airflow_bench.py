"""What the benchmarks that run real Airflow tasks on the simulated federation share (bench_operator.py,
bench_failover.py): a throw-away Airflow home, priced clusters, a fresh federation spec, the placement
record of a run."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any


def airflow_home(prefix: str, dags_folder: Path, **extra: str) -> None:
    """A new AIRFLOW_HOME on SQLite under /tmp, its database initialised; ``extra``: more settings."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
            **extra,
        }
    )
    from airflow.utils import db

    db.initdb()


def priced_clusters(count: int, pool: dict[str, Any]) -> dict[str, Any]:
    """A simulator config of ``count`` clusters c00, c01, ... in one region, each with one node ``pool``;
    c00 is the cheapest, then c01, ...: a failover target is predictable."""
    return {
        "time_scale": 1.0,
        "clusters": [
            {
                "name": f"c{i:02d}",
                "region": "r1",
                "prices": {"cpu_hour": 0.01 * (1 + i), "memory_gib_hour": 0.001 * (1 + i)},
                "node_pools": [dict(pool)],
            }
            for i in range(count)
        ],
    }


def fresh_federation(fed: Any, workdir: Path, snapshot_ttl_seconds: int | None = None) -> None:
    """A new federation name: no snapshot, cooldown or reservation carries over between runs."""
    import yaml

    spec = yaml.safe_load((fed.state_dir / "federation.yaml").read_text())
    spec["name"] = f"bench-{uuid.uuid4().hex[:8]}"
    if snapshot_ttl_seconds is not None:
        spec["policy"]["snapshot_ttl_seconds"] = snapshot_ttl_seconds
    path = workdir / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    os.environ["AIRFLOW__FEDSCHED__FEDERATION_SPEC"] = str(path)


def placement_record(dag_id: str, run_id: str) -> Any:
    """The ``fedsched_placement`` XCom of the run's task (decoded), or None."""
    import json

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_id, run_id=run_id, key="fedsched_placement")
            .one_or_none()
        )
        value = None if row is None else XComModel.deserialize_value(row)
    return json.loads(value) if isinstance(value, str) else value
