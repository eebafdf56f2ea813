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


def pytest_itemcollected(item: pytest.Item) -> None:
    # Under pytest-xdist (--dist loadgroup) the tests that use their module's own module-scoped fixture
    # (an Airflow deployment, a simulator) share one worker, so that it is set up once, not once per worker.
    if own_module_fixture(item):
        item.add_marker(pytest.mark.xdist_group(name=item.nodeid.split("::", 1)[0]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.check(items)
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        for item in items:
            in_group(item)


def in_group(item: pytest.Item) -> None:
    """The test id's ``@group`` suffix, by which xdist's scheduler keeps a group on one worker.

    pytest-xdist 3.8 writes it into ``item._nodeid``, which pytest 9.2 no longer reads (its ids are
    structured): the groups were silently ignored (pytest-dev/pytest-xdist#1386, fix pending in #1388).
    Written here as that fix does, unless xdist already did."""
    from _pytest.nodeid import coerce_node_id

    groups = sorted(
        {
            str(m.kwargs.get("name", m.args[0] if m.args else "default"))
            for m in item.iter_markers("xdist_group")
        }
    )
    if groups and "@" not in item.nodeid:
        item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")  # type: ignore[attr-defined]


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
