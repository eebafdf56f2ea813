"""An isolated Airflow for tests: one AIRFLOW_HOME on SQLite per test session, migrated once.

``configure_environment`` must run before anything imports ``airflow`` (``tests/conftest.py`` calls it at
import time), because Airflow reads its configuration once, on first import.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

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
            # The tests' DAG files import the provider; a worker process on a busy 2-core CI machine can
            # take longer than Airflow's default 30 s to parse them.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            # One key for the session: worker subprocesses must decrypt what the test process wrote.
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
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


@contextlib.contextmanager
def parsing_for(dag_id: str | None) -> Iterator[None]:
    """Parse DAG files for ``dag_id`` alone, as a task's process does (Airflow's parsing context): the test
    DAG files then register that DAG only, and ``dag.test`` writes that one to the database, not all of
    them (tests/operators/dags/federated_dags.py, ``dag_named``). ``None``: every DAG."""
    from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager

    if dag_id is None:
        yield
        return
    with _airflow_parsing_context_manager(dag_id=dag_id):
        yield


def load_dag(dag_file: Path, dag_id: str) -> Any:
    """Link ``dag_file`` into the session's DAGs folder and parse it for ``dag_id``, the way a task's
    process does."""
    from airflow.dag_processing.dagbag import DagBag

    dags_folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    target = dags_folder / dag_file.name
    if not target.exists():
        target.symlink_to(dag_file.resolve())
    with parsing_for(dag_id):
        bag = DagBag(dag_folder=str(target))
    if bag.import_errors:
        raise AssertionError(f"DAG file {dag_file} failed to import: {bag.import_errors}")
    dag = bag.get_dag(dag_id)
    if dag is None:
        raise AssertionError(f"DAG {dag_id!r} not found in {dag_file}")
    return dag


def serialize_dags(dag_id: str | None = None) -> None:
    """Parse the session's DAGs folder into the metadata database, as the DAG processor would (for
    ``dag_id`` alone when named: see :func:`parsing_for`)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        with parsing_for(dag_id):
            bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


def create_dag_run(dag_id: str, run_id: str, logical_date: Any) -> None:
    """A running DagRun with its task instances, as the scheduler creates it (DAGs must be serialized)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    dag = SerializedDagModel.get_dag(dag_id)
    if dag is None:
        raise AssertionError(f"DAG {dag_id!r} is not serialized: call serialize_dags() first")
    with create_session() as session:
        dag.create_dagrun(
            run_id=run_id,
            logical_date=logical_date,
            data_interval=(logical_date, logical_date),
            run_after=logical_date,
            conf=None,
            run_type=DagRunType.MANUAL,
            state=DagRunState.RUNNING,
            triggered_by=DagRunTriggeredByType.TEST,
            triggering_user_name="tests",
            start_date=logical_date,
            session=session,
        )


def run_dag(dag_file: Path, dag_id: str, **test_kwargs: Any) -> Any:
    """Run a DAG in-process with ``dag.test()`` and return its DagRun."""
    with parsing_for(dag_id):  # dag.test parses the DAGs folder again and writes what it finds
        return load_dag(dag_file, dag_id).test(**test_kwargs)


def task_states(dag_run: Any) -> dict[str, str]:
    """``task_id -> state`` of a DagRun returned by :func:`run_dag`."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}


def end_the_task_once_it_watches(handle: Any, reads: str) -> None:
    """End the task running under ``dag.test`` in this process as a user's "mark failed" does, once its
    operator watches what it launched (``reads``, a path on ``handle``, keeps being read: the operator is
    past creating it and publishing its record): SIGTERM, whose handler (the task runner's, installed
    while the task runs) calls ``on_kill``."""
    import signal

    from airflow_provider_fedsched.sim import wait_for

    seen = handle.request_count("GET", reads)
    wait_for(lambda: handle.request_count("GET", reads) >= seen + 3, timeout=60)
    wait_for(lambda: getattr(signal.getsignal(signal.SIGTERM), "__name__", "") == "_on_term", timeout=30)
    wait_for(_main_thread_is_not_logging, timeout=30, interval=0.002)
    os.kill(os.getpid(), signal.SIGTERM)


def _main_thread_is_not_logging() -> bool:
    """Whether the main thread is outside structlog's writer. ``on_kill`` runs in the SIGTERM handler, on
    the main thread, and logs; a handler that interrupts that thread while it holds structlog's output
    lock (not reentrant) waits for it forever: a CI run under load hung that way. A worker's supervisor
    sends its SIGTERM at any moment (docs/development.md, "Parallel runs"); the test picks one where the
    handler can log."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if "structlog" in frame.f_code.co_filename:
            return False
        frame = frame.f_back
    return True
