"""Every test has exactly one tier, the one its fixtures imply or a heavier one it declares; the markers
pyproject registers and the Makefile selects are the tiers of tests/tiers.py (docs/development.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests import tiers

REPO = Path(__file__).resolve().parents[1]


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert items and request.node in items
    wrong = {item.nodeid: tiers.tier_of(item) for item in items if len(tiers.tier_of(item)) != 1}
    assert wrong == {}


def test_pyproject_registers_each_tier_and_the_default_run_leaves_out_conformance_and_soak() -> None:
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":", 1)[0] for line in options["markers"]}
    assert set(tiers.TIERS) <= registered
    assert "--strict-markers" in options["addopts"]
    assert "-m 'not conformance and not soak'" in options["addopts"]


def test_make_test_fast_selects_the_fast_tiers() -> None:
    makefile = (REPO / "Makefile").read_text()
    (selected,) = re.findall(r"^FAST_TIERS := (.+)$", makefile, re.MULTILINE)
    assert selected.split(" or ") == list(tiers.FAST)


CONFTEST = """
import pytest
from tests.tiers import check as pytest_collection_modifyitems

@pytest.fixture
def airflow_db(): yield

@pytest.fixture
def fed(): yield

@pytest.fixture
def sim_federation(airflow_db): yield  # as tests/operators/conftest.py: the Airflow tier, through a fixture
"""

TESTS = """
import pytest
from hypothesis import given, strategies

def test_plain(): pass
def test_on_the_sim(fed): pass
def test_on_airflow(airflow_db): pass
def test_on_the_operators_federation(sim_federation): pass
@given(strategies.integers())
def test_property(n): pass
@pytest.mark.sim
def test_starts_its_own_simulator(): pass
@pytest.mark.browser
def test_browser(airflow_db): pass
"""


def collected(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(
        "--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", *args
    )


def names(result: pytest.RunResult) -> set[str]:
    return {line.split("::", 1)[1] for line in result.outlines if "::" in line}


def test_a_tier_follows_from_the_fixtures_and_a_marker_may_only_raise_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=TESTS)

    selected = {tier: collected(pytester, "-m", tier) for tier in ("unit", "property", "sim", "airflow")}
    assert {tier: result.ret for tier, result in selected.items()} == dict.fromkeys(selected, 0)
    assert names(selected["unit"]) == {"test_plain"}
    assert names(selected["property"]) == {"test_property"}
    assert names(selected["sim"]) == {"test_on_the_sim", "test_starts_its_own_simulator"}
    assert names(selected["airflow"]) == {"test_on_airflow", "test_on_the_operators_federation"}

    # A marker lighter than the fixtures, or two tiers: the run stops before any test, naming the test.
    pytester.makepyfile(
        test_cases=TESTS + "\n@pytest.mark.sim\ndef test_claims_less(airflow_db): pass\n"
        "\n@pytest.mark.sim\n@pytest.mark.airflow\ndef test_two_tiers(airflow_db): pass\n"
    )
    refused = collected(pytester)
    output = "\n".join(refused.outlines + refused.errlines)
    assert refused.ret != 0
    assert "test_claims_less: marked sim but its fixtures make it airflow" in output
    assert "test_two_tiers: more than one tier marker" in output
