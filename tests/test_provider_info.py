"""The provider info declares every surface (hooks, operators, triggers, extra links), and Airflow's
ProvidersManager reads and validates it. The API server showing the extra link for a federated task
instance is tested end to end in ``tests/plugins/test_ui_e2e.py``."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from pathlib import Path
from typing import Any

import airflow

import airflow_provider_fedsched
from airflow_provider_fedsched.get_provider_info import get_provider_info

PACKAGE = "airflow_provider_fedsched"
INFO = get_provider_info()


def declared_modules(kind: str) -> set[str]:
    return {module for entry in INFO[kind] for module in entry["python-modules"]}


def surface_classes() -> dict[str, set[str]]:
    """``kind -> {module}`` for every module of the Airflow surfaces that defines such a class."""
    from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink
    from airflow.triggers.base import BaseTrigger

    bases: dict[str, type[Any]] = {
        "hooks": BaseHook,
        "operators": BaseOperator,
        "triggers": BaseTrigger,
        "extra-links": BaseOperatorLink,
    }
    found: dict[str, set[str]] = {kind: set() for kind in bases}
    for part in ("hooks", "operators", "triggers"):
        try:
            package = importlib.import_module(f"{PACKAGE}.{part}")
        except ModuleNotFoundError:
            continue
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ != module.__name__:
                    continue
                for kind, base in bases.items():
                    if issubclass(cls, base):
                        found[kind].add(
                            f"{module.__name__}.{cls.__qualname__}"
                            if kind == "extra-links"
                            else module.__name__
                        )
    return found


def test_every_hook_operator_trigger_and_extra_link_is_declared() -> None:
    found = surface_classes()
    for kind in ("hooks", "operators", "triggers"):
        assert found[kind] <= declared_modules(kind), (
            f"{kind}: declare {sorted(found[kind] - declared_modules(kind))}"
        )
    assert found["extra-links"] <= set(INFO["extra-links"])
    assert found["hooks"] and found["operators"] and found["extra-links"]


def test_everything_declared_imports() -> None:
    for kind in ("hooks", "operators", "triggers"):
        for module in declared_modules(kind):
            importlib.import_module(module)
    for path in [*INFO["extra-links"], *(plugin["plugin-class"] for plugin in INFO["plugins"])]:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path
    assert INFO["versions"] == [airflow_provider_fedsched.__version__]


def test_the_provider_info_is_valid_for_airflows_schema() -> None:
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(INFO, schema)


def test_providers_manager_reads_the_provider_info() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    provider = manager.providers["airflow-provider-fedsched"]
    assert provider.data["extra-links"] == INFO["extra-links"]
    assert "airflow_provider_fedsched.operators.links.FederatedClusterLink" in manager.extra_links_class_names
    # Members are connections of cncf.kubernetes' type; this provider does not register it a second time.
    kubernetes = ProvidersManagerTaskRuntime().hooks["kubernetes"]
    assert kubernetes is not None and kubernetes.package_name == "apache-airflow-providers-cncf-kubernetes"
