"""Session-wide test setup: an isolated SQLite Airflow, configured before anything imports airflow, and
each test's tier (tests/tiers.py).

Every process configures its own Airflow home: under pytest-xdist each worker has its own metadata
database, DAGs folder and Fernet key, so workers share no file.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import airflow_harness, tiers

airflow_harness.configure_environment()

# tests/test_tiers.py runs pytest on small generated suites, in this process.
pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[None]:
    """A migrated metadata database, created once per session (per xdist worker) and removed after it."""
    airflow_harness.migrate_database()
    yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers.check(items)
    for item in items:
        if own_module_fixture(item):
            # Under pytest-xdist (--dist loadgroup) the module's tests share one worker, so its expensive
            # module fixture (an Airflow deployment, a simulator) is set up once, not once per worker.
            item.add_marker(pytest.mark.xdist_group(name=item.nodeid.split("::", 1)[0]))
    # The slowest tiers first: in parallel, the short unit tests fill the workers' last minutes.
    items.sort(key=lambda item: -tiers.TIERS.index(tiers.tier_of(item)[0]))


def own_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a module-scoped fixture defined in its own module."""
    info = getattr(item, "_fixtureinfo", None)
    module = item.nodeid.split("::", 1)[0]
    return info is not None and any(
        definition.scope == "module" and definition.baseid == module
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    # The home is removed whether or not a test used it (an xdist controller never migrates its own).
    airflow_harness.remove_home()
