"""Session-wide test setup: an isolated SQLite Airflow, configured before anything imports airflow."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import airflow_harness

airflow_harness.configure_environment()


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[None]:
    """A migrated metadata database, created once per session and removed after it."""
    airflow_harness.migrate_database()
    yield
    airflow_harness.remove_home()
