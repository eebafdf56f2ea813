"""Each test's tier (docs/development.md): what it needs, and so which `make` target runs it.

A tier follows from what the test uses, so that a new test lands in the right one without a marker:

- ``conformance``: collected under tests/conformance (real control planes; `make conformance`);
- ``airflow``: uses the ``airflow_db`` fixture (Airflow's metadata database, DAG runs, Airflow processes);
  a test that starts Airflow (or ``fedsched`` verbs that load it) in processes of its own says so;
- ``sim``: uses a simulated federation fixture (``fed``, ``small_fed``, ``sim_federation``, ...);
- ``property``: a hypothesis test;
- ``unit``: none of these.

A module or test may say its tier with a marker where the fixtures do not show it: a test that starts its
own simulator, in its process or another, is ``sim``; the browser test is ``browser``; ``soak`` needs the
soak's own deployment. A marker may only name a tier at least as heavy as the one its fixtures imply, and
a test has one tier marker at most: a test that uses the Airflow database is never run by `make test-fast`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Lightest first: a marker may raise a test's tier, never lower it.
TIERS = ("unit", "property", "sim", "airflow", "browser", "conformance", "soak")
FAST = ("unit", "property", "sim")
"""What `make test-fast` runs: no Airflow database, no Airflow process, no browser."""

AIRFLOW_FIXTURES = frozenset({"airflow_db"})
SIM_FIXTURES = frozenset({"fed", "small_fed", "sim_federation", "federation", "east", "solo"})
CONFORMANCE = Path(__file__).resolve().parent / "conformance"


def implied_tier(item: pytest.Item) -> str:
    """The tier the test's place and fixtures imply."""
    if Path(str(item.path)).is_relative_to(CONFORMANCE):
        return "conformance"
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & AIRFLOW_FIXTURES:
        return "airflow"
    if fixtures & SIM_FIXTURES:
        return "sim"
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return "property"
    return "unit"


def declared_tiers(item: pytest.Item) -> list[str]:
    return [mark.name for mark in item.iter_markers() if mark.name in TIERS]


def assign(item: pytest.Item) -> str | None:
    """Give ``item`` its one tier marker; return why it cannot have one, or None."""
    implied = implied_tier(item)
    if implied == "conformance":
        # A scenario imported from another suite keeps its function's marks; here it runs on the test bed.
        item.own_markers[:] = [m for m in item.own_markers if m.name not in TIERS or m.name == implied]
    declared = declared_tiers(item)
    if len(declared) > 1:
        return f"{item.nodeid}: more than one tier marker ({', '.join(declared)}); keep one of {TIERS}"
    if not declared:
        item.add_marker(getattr(pytest.mark, implied))
        return None
    if TIERS.index(declared[0]) < TIERS.index(implied):
        return f"{item.nodeid}: marked {declared[0]} but its fixtures make it {implied}; mark it {implied}"
    return None


def check(items: list[pytest.Item]) -> None:
    """``pytest_collection_modifyitems``: every test gets its tier, or the run stops naming the test."""
    problems = [problem for item in items if (problem := assign(item))]
    if problems:
        raise pytest.UsageError("tiers (tests/tiers.py):\n" + "\n".join(problems))


def tier_of(item: pytest.Item) -> list[str]:
    """The tier markers ``item`` carries after :func:`assign` (one, for a well-formed suite)."""
    return declared_tiers(item)
