"""An isolated Airflow for tests: one AIRFLOW_HOME on SQLite per test session, migrated once.

``configure_environment`` must run before anything imports ``airflow`` (``tests/conftest.py`` calls it at
import time), because Airflow reads its configuration once, on first import.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def configure_environment() -> Path:
    """Point Airflow at a fresh home and return its DAGs folder (DAG files are linked into it)."""
    home = Path(tempfile.mkdtemp(prefix="fedsched-airflow-"))
    dags = home / "dags"
    dags.mkdir()
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        }
    )
    return dags


def migrate_database() -> None:
    """Create the metadata schema once (an empty SQLite file, so ``initdb`` is a full migration)."""
    from airflow.utils import db

    db.initdb()


def remove_home() -> None:
    home = os.environ.get("AIRFLOW_HOME", "")
    if home and Path(home).name.startswith("fedsched-airflow-"):
        shutil.rmtree(home, ignore_errors=True)


def load_dag(dag_file: Path, dag_id: str) -> Any:
    """Link ``dag_file`` into the session's DAGs folder and parse it the way the DAG processor does."""
    from airflow.dag_processing.dagbag import DagBag

    dags_folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    target = dags_folder / dag_file.name
    if not target.exists():
        target.symlink_to(dag_file.resolve())
    bag = DagBag(dag_folder=str(target))
    if bag.import_errors:
        raise AssertionError(f"DAG file {dag_file} failed to import: {bag.import_errors}")
    dag = bag.get_dag(dag_id)
    if dag is None:
        raise AssertionError(f"DAG {dag_id!r} not found in {dag_file}")
    return dag


def run_dag(dag_file: Path, dag_id: str, **test_kwargs: Any) -> Any:
    """Run a DAG in-process with ``dag.test()`` and return its DagRun."""
    return load_dag(dag_file, dag_id).test(**test_kwargs)


def task_states(dag_run: Any) -> dict[str, str]:
    """``task_id -> state`` of a DagRun returned by :func:`run_dag`."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}
