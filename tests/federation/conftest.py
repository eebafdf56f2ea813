"""Every engine test runs twice: on the per-cluster loop and on the columnar snapshot index
(:mod:`federation.columns`), which the engine otherwise uses only from ``COLUMNAR_MIN_CLUSTERS`` clusters
on. The same assertions hold on both: the two paths give the same decisions. (``test_columnar_index``
compares the two itself, once.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_fedsched.federation import engine

PATHS = ["per-cluster", "columnar"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rpartition(".")[2] != "test_columnar_index":
        metafunc.parametrize("decision_path", PATHS, indirect=True)


@pytest.fixture(autouse=True)
def decision_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    path: str = getattr(request, "param", PATHS[0])
    if path == "columnar":
        monkeypatch.setattr(engine, "COLUMNAR_MIN_CLUSTERS", 0)
    yield path
